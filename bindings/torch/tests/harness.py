"""Runs a function of a test module in N processes that form one torch.distributed job.

Each process runs ``module.function(rank, world_size, *args)`` with torchrun's environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT), the build tree's package on
PYTHONPATH, and a deadline; the function usually calls :func:`init` and compares the
"collective" backend with gloo in the same process.
"""
import json
import os
import socket
import subprocess
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.environ.get("TORCH_COLLECTIVE_PYTHON", "/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                        else sys.executable)
RESULT_PREFIX = "TORCH_COLLECTIVE_RESULT "


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A free port whose successor is free too (torchrun's store takes the port, our environment
    bootstrap the next one), below the kernel's ephemeral range: a port that bind(0) handed out
    could be taken as the source port of any outgoing connection (the library's heartbeats and
    bootstraps make many) before the store binds it."""
    import random
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(10000, max(10002, low - 2))
        socks = []
        try:
            for p in (port, port + 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port pair below the ephemeral range")


class RankFailure(AssertionError):
    pass


def run_ranks(n, module, function, *args, timeout=120, env=None, expect_fail=()):
    """Starts n processes; returns each rank's result (the value passed to :func:`report`, or
    None), in rank order. A rank that exits non-zero fails the test with every rank's output,
    except ranks in expect_fail (their exit code is returned in place of a result). A run past
    ``timeout`` seconds is killed and fails."""
    port = free_port()
    # A rank still running shortly before the deadline prints every thread's Python stack and
    # exits, so a hang says where it is instead of ending as a bare kill.
    dump_after = max(timeout - 10, 5)
    code = ("import faulthandler; faulthandler.dump_traceback_later(%d, exit=True); "
            "import sys; sys.path.insert(0, %r); import %s as m; m.%s(int(sys.argv[1]), int(sys.argv[2]), "
            "*__import__('json').loads(sys.argv[3]))" % (dump_after, TESTS_DIR, module, function))
    procs = []
    for rank in range(n):
        e = dict(os.environ)
        e.update({"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(n),
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        e.update(env or {})
        procs.append(subprocess.Popen([PYTHON, "-c", code, str(rank), str(n), json.dumps(list(args))],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e, text=True))
    outputs, codes, timed_out = [], [], False
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            for q in procs:
                q.kill()
            out, _ = p.communicate()
        outputs.append(out)
        codes.append(p.returncode)
    bad = [r for r in range(n) if (codes[r] != 0 and r not in expect_fail)]
    if timed_out or bad:
        what = "timed out after %d s" % timeout if timed_out else "ranks %s failed" % bad
        raise RankFailure("%s.%s on %d ranks %s:\n%s" % (module, function, n, what, "\n".join(
            "---- rank %d (exit %s)\n%s" % (r, codes[r], outputs[r]) for r in range(n))))
    results = []
    for r in range(n):
        value = None
        for line in outputs[r].splitlines():
            if line.startswith(RESULT_PREFIX):
                value = json.loads(line[len(RESULT_PREFIX):])
        results.append(codes[r] if r in expect_fail else value)
    return results


def report(value):
    """Hands a JSON-serialisable value back to run_ranks (one per rank; the last one wins)."""
    print(RESULT_PREFIX + json.dumps(value), flush=True)


def init(timeout_s=60):
    """Initialises the default group with the "collective" backend (torchrun's environment) and
    returns a gloo group of the same ranks for reference results."""
    import datetime
    import torch.distributed as dist
    import torch_collective  # noqa: F401  registers the backend
    dist.init_process_group("collective", init_method="env://", timeout=datetime.timedelta(seconds=timeout_s))
    gloo = dist.new_group(backend="gloo")
    return gloo
