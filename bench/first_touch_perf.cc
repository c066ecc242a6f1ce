// first_touch_perf: what the first access to shared memory costs on this machine, the figures
// behind the cold-start design (docs/ARCHITECTURE.md, "Cold start"). A 16 MiB POSIX shm segment,
// space reserved as ShmHost reserves it (posix_fallocate), mapped in three ways; for each, two
// copies into it and one copy out of a second mapping of the same pages, with the minor page
// faults each took:
//   fault:    a plain mmap (every first touch is a page fault)
//   populate: MAP_POPULATE (page tables filled at mmap)
//   touched:  MAP_POPULATE, then one read per page through each mapping (what ShmHost::prefault does)
// usage: first_touch_perf [MiB=16]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

double nowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

long minorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void touch(const char* p, size_t n) {
  unsigned sink = 0;
  for (size_t i = 0; i < n; i += 4096) sink += static_cast<unsigned char>(reinterpret_cast<const volatile char*>(p)[i]);
  asm volatile("" : : "r"(sink));
}

bool run(const char* mode, size_t n, char* src) {
  const std::string name = "/coll-first-touch-" + std::to_string(getpid());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return false;
  shm_unlink(name.c_str());
  if (posix_fallocate(fd, 0, static_cast<off_t>(n)) != 0) return false;
  const bool populate = strcmp(mode, "fault") != 0;
  const int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  double t = nowMs();
  auto* a = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, flags, fd, 0));
  auto* b = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, flags, fd, 0));
  close(fd);
  if (a == MAP_FAILED || b == MAP_FAILED) return false;
  if (strcmp(mode, "touched") == 0) touch(a, n), touch(b, n);
  const double setup = nowMs() - t;
  printf("%-9s set-up %7.2f ms", mode, setup);
  for (int i = 0; i < 2; ++i) {
    long f = minorFaults();
    t = nowMs();
    memcpy(a, src, n);
    printf(" | copy in %d: %7.2f ms %5ld faults", i + 1, nowMs() - t, minorFaults() - f);
  }
  long f = minorFaults();
  t = nowMs();
  memcpy(src, b, n);
  printf(" | copy out, 2nd mapping: %7.2f ms %5ld faults\n", nowMs() - t, minorFaults() - f);
  munmap(a, n);
  munmap(b, n);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = static_cast<size_t>(argc > 1 ? atoi(argv[1]) : 16) << 20;
  if (n == 0) {
    fprintf(stderr, "usage: first_touch_perf [MiB >= 1]\n");
    return 2;
  }
  auto* src = static_cast<char*>(aligned_alloc(4096, n));
  memset(src, 1, n);
  for (const char* mode : {"fault", "populate", "touched"}) {
    if (!run(mode, n, src)) {
      perror("shared memory");
      return 2;
    }
  }
  free(src);
  return 0;
}
