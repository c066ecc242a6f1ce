/* elastic_train: data-parallel training that survives the death of a rank.
 *
 * Every rank trains the same small model (linear regression, D weights and a bias, plain SGD) on
 * its own synthetic minibatches and the ranks average their gradients with an All-Reduce each
 * step. Rank 0 writes a checkpoint every few steps. When a rank dies, the survivors
 *
 *   1. learn whom they lost (collCommGetFailedRanks),
 *   2. make a communicator without it (collCommShrink) and drop the broken one (collCommAbort),
 *   3. let a replacement process in (collCommGetUniqueId, a grow id handed over in a file of the
 *      job's private directory, then collCommGrow on both sides),
 *   4. reload the last checkpoint and recompute the steps after it.
 *
 * The replacement is started by the launcher (collrun --respawn 1, which sets COLL_RESTART_COUNT
 * in it): it does not initialize from the environment like the first processes, it waits for the
 * grow id, joins with collCommGrow and loads the same checkpoint.
 *
 *   collrun -np 6 --respawn 1 ./elastic_train --kill-rank 3 --kill-at 25
 *
 * The final parameters are bit-identical to those of a run without the failure: see
 * allReduceGradient for why.
 *
 * One replacement at a time: the replacement takes the last rank, nranks-1, so the example
 * recovers from the loss of one rank per failure (two ranks lost at once would need two
 * newcomers and a way to tell them apart, such as the launcher's slot number).
 *
 * A grow that fails (the replacement dies in it, or never comes) leaves the shrunk communicator as
 * it was: the survivors check it and try again with a new grow id, and the next replacement the
 * launcher starts waits for that id. --die-in-grow 1 makes the first replacement die inside
 * collCommGrow to show it:
 *
 *   COLL_TIMEOUT=10 collrun -np 6 --respawn 2 ./elastic_train --kill-rank 3 --kill-at 25 \
 *       --die-in-grow 1 --grow-delay-ms 1000 --grow-timeout-ms 3000 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <collective/collective.h>

#define D 16            /* weights; the bias makes D+1 parameters */
#define NPARAMS (D + 1) /* params[0..D-1] weights, params[D] bias */
#define BATCH 32        /* samples per rank per step */
#define LEARNING_RATE 0.1
#define FIXED_SCALE 0x1p30  /* fixed point: 30 fractional bits */
#define MAX_FAILED 64       /* failed ranks we can name in one recovery */
#define GROW_ID_WAIT_SEC 60 /* how long a replacement waits for the grow id */
#define GROW_ID_POLL_MS 50
#define GROW_ATTEMPTS 3 /* grows tried per recovery, each with a new grow id */

#define CKPT_MAGIC 0x4b435445u /* "ETCK" in little-endian bytes */
#define CKPT_VERSION 1u

/* The checkpoint file: this header, then NPARAMS doubles. Native byte order: it is read back by
 * ranks of the same job on the same kind of machine. */
typedef struct {
  uint32_t magic;
  uint32_t version;
  uint64_t step; /* the next step to run */
  uint32_t dim;  /* D */
  uint32_t reserved;
} CkptHeader;

typedef struct {
  int steps;
  int ckptEvery;
  const char* ckptDir;
  const char* outPath;
  int killRank;
  int killAt;
  int dieInGrow;     /* 1: the first replacement dies inside collCommGrow (a demonstration) */
  int growDelayMs;   /* survivors wait this long between publishing a grow id and joining */
  int growTimeoutMs; /* the grown communicator's timeout (0: the library's, COLL_TIMEOUT) */
} Options;

/* ---- errors ---------------------------------------------------------------------------------- */

/* Any library failure outside the one we recover from (a failed training step) ends the process:
 * the launcher then stops the job, or replaces the process if it has replacements left. */
static void check(collResult_t res, collComm_t comm, const char* what) {
  if (res == collSuccess) return;
  fprintf(stderr, "elastic_train: %s failed: %s: %s\n", what, collGetErrorString(res), collGetLastError(comm));
  exit(1);
}

static void die(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "elastic_train: ");
  vfprintf(stderr, fmt, args);
  fprintf(stderr, "\n");
  va_end(args);
  exit(1);
}

/* ---- synthetic data -------------------------------------------------------------------------- */

/* splitmix64: a tiny, good integer hash. The data depend only on (rank, step), never on rand() or
 * on history, so a recomputed step sees exactly the minibatches it saw the first time. */
static uint64_t nextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1), from the top 53 bits. */
static double uniform(uint64_t* state) { return (double)(nextRandom(state) >> 11) * 0x1p-53 * 2.0 - 1.0; }

/* The model the data come from: what training should find. */
static double trueParam(int i) { return i == D ? 0.5 : (double)((i * 7) % 11 - 5) / 4.0; }

/* Loss (mean squared error / 2) and gradient of this rank's minibatch of `step`. */
static double localGradient(const double* params, int rank, int step, double* grad) {
  uint64_t state = ((uint64_t)(uint32_t)rank << 32) | (uint32_t)step;
  nextRandom(&state); /* mix the seed before the first sample */
  double loss = 0;
  memset(grad, 0, NPARAMS * sizeof(double));
  for (int n = 0; n < BATCH; ++n) {
    double x[D];
    double target = trueParam(D), pred = params[D];
    for (int i = 0; i < D; ++i) {
      x[i] = uniform(&state);
      target += trueParam(i) * x[i];
      pred += params[i] * x[i];
    }
    target += 0.1 * uniform(&state); /* noise */
    double err = pred - target;
    loss += 0.5 * err * err;
    for (int i = 0; i < D; ++i) grad[i] += err * x[i];
    grad[D] += err;
  }
  for (int i = 0; i < NPARAMS; ++i) grad[i] /= BATCH;
  return loss / BATCH;
}

/* ---- the training step ----------------------------------------------------------------------- */

/* Sums gradient and loss over the ranks and turns the sums into means. Returns the All-Reduce's
 * result: a failure here is what the caller recovers from.
 *
 * Why fixed point: a floating-point sum depends on the order of its terms, and the order in which
 * an All-Reduce adds the ranks' values depends on the algorithm, the number of ranks and which
 * rank holds which data, all of which change when a rank is replaced. Integers add exactly in any
 * order, so a run that was interrupted, restored from a checkpoint and finished on a regrown
 * communicator ends with parameters bit-identical to those of an uninterrupted run, whatever the
 * reduction order. 30 fractional bits keep about nine decimal digits of each gradient, and the
 * values here are far from int64's limits. */
static collResult_t allReduceGradient(collComm_t comm, int nranks, double* grad, double* loss) {
  int64_t fixed[NPARAMS + 1];
  for (int i = 0; i < NPARAMS; ++i) fixed[i] = llround(grad[i] * FIXED_SCALE);
  fixed[NPARAMS] = llround(*loss * FIXED_SCALE);
  collResult_t res = collAllReduce(fixed, fixed, NPARAMS + 1, collInt64, collSum, comm, NULL);
  if (res != collSuccess) return res;
  for (int i = 0; i < NPARAMS; ++i) grad[i] = (double)fixed[i] / FIXED_SCALE / nranks;
  *loss = (double)fixed[NPARAMS] / FIXED_SCALE / nranks;
  return collSuccess;
}

/* Checks that a new communicator works and has the size we expect: an All-Reduce of ones. It is
 * collective, so every member (survivor or newcomer) runs it at the same point. */
static void verifyComm(collComm_t comm, int expectSize, const char* what) {
  int size = -1;
  check(collCommCount(comm, &size), comm, "collCommCount");
  int64_t one = 1;
  check(collAllReduce(&one, &one, 1, collInt64, collSum, comm, NULL), comm, what);
  if (size != expectSize || one != expectSize) {
    fprintf(stderr, "elastic_train: %s: communicator of %d ranks summed ones to %lld, want %d\n", what, size,
            (long long)one, expectSize);
    exit(1);
  }
}

/* ---- files ----------------------------------------------------------------------------------- */

/* Writes a whole file so that readers see the old one or the new one, never a part: write a
 * temporary file next to it, fsync, rename over the name (atomic within a directory), fsync the
 * directory so the rename itself survives a crash. Mode 0600: the grow id holds the job's secret. */
static void writeFileAtomic(const char* dir, const char* name, const void* data, size_t size) {
  char path[4096], tmp[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) die("cannot create %s: %s", tmp, strerror(errno));
  const char* p = data;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("cannot write %s: %s", tmp, n < 0 ? strerror(errno) : "no progress");
    p += n;
    size -= (size_t)n;
  }
  if (fsync(fd) != 0 || close(fd) != 0) die("cannot flush %s: %s", tmp, strerror(errno));
  if (rename(tmp, path) != 0) die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
  int dfd = open(dir, O_RDONLY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
}

static void saveCheckpoint(const char* dir, int step, const double* params) {
  struct {
    CkptHeader h;
    double params[NPARAMS];
  } ckpt;
  memset(&ckpt, 0, sizeof(ckpt));
  ckpt.h.magic = CKPT_MAGIC;
  ckpt.h.version = CKPT_VERSION;
  ckpt.h.step = (uint64_t)step;
  ckpt.h.dim = D;
  memcpy(ckpt.params, params, sizeof(ckpt.params));
  writeFileAtomic(dir, "ckpt.bin", &ckpt, sizeof(ckpt));
}

/* Loads the checkpoint into params and returns its step (the next step to run). */
static int loadCheckpoint(const char* dir, double* params) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/ckpt.bin", dir);
  FILE* f = fopen(path, "rb");
  if (f == NULL) die("cannot open the checkpoint %s: %s", path, strerror(errno));
  CkptHeader h;
  int ok = fread(&h, sizeof(h), 1, f) == 1 && h.magic == CKPT_MAGIC && h.version == CKPT_VERSION && h.dim == D &&
           h.step <= (uint64_t)INT32_MAX && fread(params, sizeof(double), NPARAMS, f) == NPARAMS;
  fclose(f);
  if (!ok) die("%s is not a checkpoint of this program", path);
  return (int)h.step;
}

/* The grow id travels as one line, "<nranks> <256 hex digits>\n": the size to grow to and the id. */
static void writeGrowId(const char* dir, int nranks, const collUniqueId* id) {
  char line[16 + 2 * COLL_UNIQUE_ID_BYTES + 2];
  int len = snprintf(line, sizeof(line), "%d ", nranks);
  for (int i = 0; i < COLL_UNIQUE_ID_BYTES; ++i) len += sprintf(line + len, "%02x", (unsigned char)id->internal[i]);
  line[len++] = '\n';
  writeFileAtomic(dir, "grow.id", line, (size_t)len);
}

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Parses the grow id file; 0 if there is none yet. The file appears whole (it is renamed into
 * place), so a file that exists is complete. */
static int tryReadGrowId(const char* path, int* nranks, collUniqueId* id) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    if (errno != ENOENT) die("cannot open %s: %s", path, strerror(errno));
    return 0;
  }
  char hex[2 * COLL_UNIQUE_ID_BYTES + 1];
  int ok = fscanf(f, "%d %256s", nranks, hex) == 2 && strlen(hex) == 2 * COLL_UNIQUE_ID_BYTES && *nranks > 1;
  fclose(f);
  for (int i = 0; ok && i < COLL_UNIQUE_ID_BYTES; ++i) {
    int hi = hexDigit(hex[2 * i]), lo = hexDigit(hex[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    id->internal[i] = (char)(hi << 4 | lo);
  }
  if (!ok) die("%s is not a grow id file", path);
  return 1;
}

/* A replacement waits for the survivors' grow id, one other than `tried` (NULL: any): an id that
 * served, or failed, a grow is not tried again. */
static void readGrowId(const char* dir, int* nranks, collUniqueId* id, const collUniqueId* tried) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/grow.id", dir);
  for (int waited = 0;; waited += GROW_ID_POLL_MS) {
    if (tryReadGrowId(path, nranks, id) && (tried == NULL || memcmp(id, tried, sizeof(*id)) != 0)) return;
    if (waited >= GROW_ID_WAIT_SEC * 1000) {
      die("no %sgrow id in %s after %d s: the survivors never asked for a replacement", tried ? "new " : "", path,
          GROW_ID_WAIT_SEC);
    }
    sleepMs(GROW_ID_POLL_MS);
  }
}

static collConfig_t growConfig(const Options* opt) {
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  if (opt->growTimeoutMs > 0) config.timeoutMs = opt->growTimeoutMs;
  return config;
}

/* ---- recovery -------------------------------------------------------------------------------- */

/* Run by every survivor after a failed step: shrink to the survivors, grow back to nranks with one
 * newcomer, and return the new communicator (the old one is gone). */
static collComm_t recover(collComm_t comm, int nranks, const char* jobDir, const Options* opt) {
  int failed[MAX_FAILED], nfailed = 0;
  check(collCommGetFailedRanks(comm, failed, MAX_FAILED, &nfailed), comm, "collCommGetFailedRanks");
  if (nfailed != 1) {
    /* None: the step failed for another reason (a timeout nobody could pin on a rank). More than
     * one: this example replaces one rank at a time (see the top of the file). */
    die("the step failed with %d failed ranks known; this example replaces exactly one", nfailed);
  }
  if (jobDir == NULL) die("COLL_JOB_DIR is not set: no place to hand a grow id to a replacement");

  /* Every survivor passes the same list (the failure is propagated to all of them); the dead rank
   * takes no part. Then the broken communicator is dropped without waiting for its dead peer. */
  collComm_t small = NULL;
  check(collCommShrink(comm, failed, nfailed, &small, NULL), comm, "collCommShrink");
  check(collCommAbort(comm), NULL, "collCommAbort");
  int smallRank = -1, smallSize = -1;
  check(collCommUserRank(small, &smallRank), small, "collCommUserRank");
  check(collCommCount(small, &smallSize), small, "collCommCount");
  verifyComm(small, smallSize, "All-Reduce on the shrunk communicator");
  if (smallRank == 0) printf("shrunk to %d ranks (lost rank %d)\n", smallSize, failed[0]);

  /* Rank 0 makes the grow id and publishes it for the replacement; the survivors keep their ranks
   * 0..smallSize-1 and the replacement becomes rank nranks-1. A failed grow leaves `small` as it
   * was: check it and try again with a new id (an id serves one grow). */
  collComm_t big = NULL;
  collConfig_t config = growConfig(opt);
  for (int attempt = 1; big == NULL; ++attempt) {
    collUniqueId growId;
    if (smallRank == 0) {
      check(collCommGetUniqueId(small, &growId), small, "collCommGetUniqueId");
      writeGrowId(jobDir, nranks, &growId);
    }
    if (opt->growDelayMs > 0) sleepMs(opt->growDelayMs);
    collResult_t res = collCommGrow(small, nranks, smallRank == 0 ? &growId : NULL, -1, &big, &config);
    if (res == collSuccess) break;
    if (attempt == GROW_ATTEMPTS) check(res, small, "collCommGrow");
    verifyComm(small, smallSize, "All-Reduce on the shrunk communicator after a failed grow");
    if (smallRank == 0) {
      printf("grow attempt %d failed (%s); the shrunk communicator still works; trying again\n", attempt,
             collGetErrorString(res));
    }
  }
  verifyComm(big, nranks, "All-Reduce on the grown communicator");
  if (smallRank == 0) {
    printf("grown back to %d ranks\n", nranks);
    /* The id served its one grow; it holds the job's secret, so do not leave it lying around. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/grow.id", jobDir);
    if (unlink(path) != 0) die("cannot remove %s: %s", path, strerror(errno));
  }
  check(collCommDestroy(small), small, "collCommDestroy");
  return big;
}

/* --die-in-grow: a replacement that joins the grow and dies before it completes (the survivors
 * join --grow-delay-ms later), as a process lost in the middle of a recovery. */
typedef struct {
  int nranks;
  collUniqueId id;
  collConfig_t config;
} GrowArgs;

static void* growInBackground(void* p) {
  GrowArgs* a = (GrowArgs*)p;
  collComm_t big = NULL;
  (void)collCommGrow(NULL, a->nranks, &a->id, a->nranks - 1, &big, &a->config);
  return NULL;
}

static void dieInsideGrow(int nranks, const collUniqueId* growId, const Options* opt) {
  static GrowArgs args;
  args.nranks = nranks;
  args.id = *growId;
  args.config = growConfig(opt);
  pthread_t thread;
  if (pthread_create(&thread, NULL, growInBackground, &args) != 0) die("pthread_create failed");
  sleepMs(300); /* registered at the rendezvous by now, the survivors not yet there */
  printf("replacement 1: raising SIGKILL inside collCommGrow (--die-in-grow)\n");
  raise(SIGKILL);
}

/* A replacement's start: join the survivors' grow as the last rank; if the grow fails, wait for the
 * survivors' next grow id. */
static collComm_t joinAsReplacement(const char* jobDir, const char* restartCount, const Options* opt) {
  if (jobDir == NULL) die("COLL_JOB_DIR is not set: no place to find the grow id");
  int nranks = 0;
  collUniqueId growId, tried;
  collConfig_t config = growConfig(opt);
  for (int attempt = 1;; ++attempt) {
    readGrowId(jobDir, &nranks, &growId, attempt > 1 ? &tried : NULL);
    if (opt->dieInGrow && strcmp(restartCount, "1") == 0) dieInsideGrow(nranks, &growId, opt);
    collComm_t big = NULL;
    collResult_t res = collCommGrow(NULL, nranks, &growId, nranks - 1, &big, &config);
    if (res == collSuccess) {
      verifyComm(big, nranks, "All-Reduce on the grown communicator");
      printf("replacement %s joined as rank %d of %d\n", restartCount, nranks - 1, nranks);
      return big;
    }
    if (attempt == GROW_ATTEMPTS) check(res, NULL, "collCommGrow");
    printf("replacement %s: grow attempt %d failed (%s); waiting for a new grow id\n", restartCount, attempt,
           collGetErrorString(res));
    tried = growId;
  }
}

/* ---- main ------------------------------------------------------------------------------------ */

static int parseInt(const char* text, const char* option) {
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0 || v > INT32_MAX) die("bad value for %s", option);
  return (int)v;
}

static void usage(void) {
  fprintf(stderr,
          "usage: elastic_train [--steps N] [--ckpt-every K] [--ckpt-dir DIR] [--out FILE]\n"
          "                     [--kill-rank R --kill-at S]\n"
          "  --steps N       training steps (60)\n"
          "  --ckpt-every K  rank 0 writes DIR/ckpt.bin every K steps (10)\n"
          "  --ckpt-dir DIR  checkpoint directory ($COLL_JOB_DIR)\n"
          "  --out FILE      rank 0 writes the final parameters there, one \"%%a\" per line\n"
          "  --kill-rank R --kill-at S  rank R raises SIGKILL right before step S (first processes only)\n"
          "  --die-in-grow 1     the first replacement dies inside collCommGrow (the survivors try again)\n"
          "  --grow-delay-ms N   survivors join a grow N ms after publishing its id (0)\n"
          "  --grow-timeout-ms N the grown communicator's timeout (COLL_TIMEOUT)\n"
          "Run under collrun; with --respawn 1 it recovers from the death of a rank.\n");
  exit(2);
}

static Options parseOptions(int argc, char** argv) {
  Options o = {60, 10, getenv("COLL_JOB_DIR"), NULL, -1, -1, 0, 0, 0};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (strcmp(a, "--steps") == 0) o.steps = parseInt(v, a);
    else if (strcmp(a, "--ckpt-every") == 0) o.ckptEvery = parseInt(v, a);
    else if (strcmp(a, "--ckpt-dir") == 0) o.ckptDir = v;
    else if (strcmp(a, "--out") == 0) o.outPath = v;
    else if (strcmp(a, "--kill-rank") == 0) o.killRank = parseInt(v, a);
    else if (strcmp(a, "--kill-at") == 0) o.killAt = parseInt(v, a);
    else if (strcmp(a, "--die-in-grow") == 0) o.dieInGrow = parseInt(v, a);
    else if (strcmp(a, "--grow-delay-ms") == 0) o.growDelayMs = parseInt(v, a);
    else if (strcmp(a, "--grow-timeout-ms") == 0) o.growTimeoutMs = parseInt(v, a);
    else usage();
  }
  if (o.ckptEvery < 1) die("--ckpt-every must be at least 1");
  if (o.ckptDir == NULL) die("no checkpoint directory: pass --ckpt-dir or run under collrun (COLL_JOB_DIR)");
  if ((o.killRank >= 0) != (o.killAt >= 0)) die("--kill-rank and --kill-at go together");
  return o;
}

int main(int argc, char** argv) {
  /* Line-buffered even into the launcher's pipe, so a rank killed mid-run loses no printed line. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  Options opt = parseOptions(argc, argv);
  const char* jobDir = getenv("COLL_JOB_DIR");
  const char* restartCount = getenv("COLL_RESTART_COUNT");
  const int replacement = restartCount != NULL;

  double params[NPARAMS] = {0};
  int step = 0, rank = -1, nranks = -1;
  collComm_t comm = NULL;
  if (replacement) {
    comm = joinAsReplacement(jobDir, restartCount, &opt);
    step = loadCheckpoint(opt.ckptDir, params);
  } else {
    check(collCommInitFromEnv(&comm, NULL), NULL, "collCommInitFromEnv");
  }
  check(collCommUserRank(comm, &rank), comm, "collCommUserRank");
  check(collCommCount(comm, &nranks), comm, "collCommCount");
  if (!replacement) verifyComm(comm, nranks, "All-Reduce on the first communicator");
  /* The rank this process started with: --kill-rank names a process, not whichever process holds
   * that rank after a recovery. */
  const int firstRank = rank;
  /* A checkpoint from the start, so that a failure before the first periodic one has one to load.
   * A new job starts from step 0: it overwrites whatever ckpt.bin the directory held. */
  if (!replacement && rank == 0) saveCheckpoint(opt.ckptDir, 0, params);

  double loss = 0;
  while (step < opt.steps) {
    if (!replacement && firstRank == opt.killRank && step == opt.killAt) {
      printf("rank %d: raising SIGKILL before step %d\n", rank, step);
      raise(SIGKILL);
    }
    double grad[NPARAMS];
    loss = localGradient(params, rank, step, grad);
    collResult_t res = allReduceGradient(comm, nranks, grad, &loss);
    if (res != collSuccess) {
      /* The library has logged the details (which peer, how it was noticed). */
      printf("rank %d: step %d failed (%s); recovering\n", rank, step, collGetErrorString(res));
      comm = recover(comm, nranks, jobDir, &opt);
      /* Ranks may have changed (the survivors after the dead one moved down by one), but the set of
       * ranks 0..nranks-1, and so the set of minibatches of each step, is the same as before. */
      check(collCommUserRank(comm, &rank), comm, "collCommUserRank");
      /* Everyone, rank 0 included, goes back to the same saved state: the failed step and every
       * step since the checkpoint are recomputed. */
      step = loadCheckpoint(opt.ckptDir, params);
      if (rank == 0) printf("restored the checkpoint of step %d\n", step);
      continue;
    }
    for (int i = 0; i < NPARAMS; ++i) params[i] -= LEARNING_RATE * grad[i];
    ++step;
    if (rank == 0 && step % opt.ckptEvery == 0) {
      saveCheckpoint(opt.ckptDir, step, params);
      printf("step %d: loss %.6f, checkpoint written\n", step, loss);
    }
  }

  check(collCommDestroy(comm), comm, "collCommDestroy");
  if (rank == 0) {
    printf("final loss %.9f after %d steps\n", loss, opt.steps);
    if (opt.outPath != NULL) {
      FILE* f = fopen(opt.outPath, "w");
      if (f == NULL) die("cannot create %s: %s", opt.outPath, strerror(errno));
      for (int i = 0; i < NPARAMS; ++i) fprintf(f, "%a\n", params[i]);
      if (fclose(f) != 0) die("cannot write %s", opt.outPath);
    }
  }
  return 0;
}
