"""Failures on the "collective" backend: a killed rank (the survivors' work raises promptly naming
it; failed_ranks, shrink and a working group of the survivors), abort (waiting and queued work
fails at once, the process exits cleanly), destroy and a new default group in the same processes,
and calls on a group this process is not a member of (an error or PyTorch's no-op, never a hang)."""
import os
import re
import threading
import time
import warnings

import pytest
import torch
import torch.distributed as dist

from harness import free_port, init, report, run_ranks

GROUP_TIMEOUT_S = 20  # the process groups' timeout (COLL_TIMEOUT of their communicators)


def error_text(fn):
    """Runs fn, which must raise; returns the error's text and how long fn took."""
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (RuntimeError from c10d; the type is checked by the caller's text)
        return "%s: %s" % (type(e).__name__, e), time.monotonic() - start
    raise AssertionError("expected an error, %s returned after %.2f s" % (fn, time.monotonic() - start))


# ---- a killed rank -------------------------------------------------------------------------


def killed_rank(rank, world, warmup):
    """The last rank dies after `warmup` successful all_reduces; the others' next one must fail."""
    import torch_collective
    init(timeout_s=int(os.environ.get("TEST_FAILURES_TIMEOUT_S", GROUP_TIMEOUT_S)))
    t = torch.ones(4096)
    for _ in range(warmup):
        dist.all_reduce(t)
    assert t[0].item() == world ** warmup, t[0]
    if rank == world - 1:
        os._exit(17)  # abruptly: no destructor, no goodbye to the peers
    t = torch.ones(4096)
    work = dist.all_reduce(t, async_op=True)
    message, seconds = error_text(work.wait)
    out = {"message": message, "seconds": seconds, "failed": torch_collective.failed_ranks()}
    if warmup == 1:  # test_killed_rank_after_first_call: the timing and the name only
        report(out)
        return
    # The old group stays failed (promptly, no new wait for the dead rank).
    out["again"], out["again_seconds"] = error_text(lambda: dist.all_reduce(torch.ones(8)))
    # The survivors continue without it.
    start = time.monotonic()
    survivors = torch_collective.shrink(out["failed"])
    out["shrink_seconds"] = time.monotonic() - start
    out["size"], out["rank"] = survivors.size(), survivors.rank()
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x, group=survivors)  # all_reduce takes any ProcessGroup object as group=
    out["sum"] = x.unique().tolist()
    gathered = [torch.empty(2) for _ in range(2)]
    dist.all_gather(gathered, torch.full((2,), float(rank)), group=survivors)
    dist.barrier(group=survivors)
    out["gathered"] = [g.tolist() for g in gathered]
    # The shrunk group is in torch.distributed's tables: calls that name a rank take it too.
    y = torch.full((4,), float(rank))
    dist.broadcast(y, src=1, group=survivors)  # global rank 1 is the shrunk group's rank 1
    out["broadcast"] = y.tolist()
    out["group_rank"] = dist.get_rank(group=survivors)
    # The new group knows of no failed rank.
    out["failed_new"] = torch_collective.failed_ranks(survivors)
    report(out)
    dist.destroy_process_group()


def test_killed_rank_fails_promptly_then_shrink():
    start = time.monotonic()
    # Three successful all_reduces first; test_killed_rank_after_first_call kills after one.
    results = run_ranks(3, "test_failures", "killed_rank", 3, expect_fail=(2,), timeout=90)
    assert results[2] == 17, results[2]  # the victim's exit code
    for rank in (0, 1):
        r = results[rank]
        print("\nrank %d: all_reduce raised after %.3f s (timeout %d s); shrink took %.3f s; job %.1f s: %s" % (
            rank, r["seconds"], GROUP_TIMEOUT_S, r["shrink_seconds"], time.monotonic() - start,
            r["message"][:300]))
        # Found by failure detection (the dead process), not by the timeout.
        assert r["seconds"] < GROUP_TIMEOUT_S / 4, r
        assert r["message"].startswith("RuntimeError: "), r["message"]
        assert re.search(r"\brank 2\b", r["message"]), r["message"]
        assert "failed ranks of this group: 2]" in r["message"], r["message"]
        assert r["failed"] == [2], r["failed"]
        assert re.search(r"\brank 2\b", r["again"]) and r["again_seconds"] < 2, (r["again"], r["again_seconds"])
        assert (r["size"], r["rank"]) == (2, rank), r
        assert r["sum"] == [3.0], r["sum"]  # 1 + 2 from the survivors
        assert r["gathered"] == [[0.0, 0.0], [1.0, 1.0]], r["gathered"]
        assert r["broadcast"] == [1.0] * 4, r["broadcast"]
        assert r["group_rank"] == rank, r["group_rank"]
        assert r["failed_new"] == [], r["failed_new"]


def test_killed_rank_after_first_call():
    """A rank dying right after the group's first call is found by its death, not the timeout
    (with the library's default of two lanes it was: the second lane, made on the next call,
    waited for the dead rank; torch_collective runs one lane per communicator)."""
    timeout_s = 6
    results = run_ranks(3, "test_failures", "killed_rank", 1, expect_fail=(2,), timeout=60,
                        env={"TEST_FAILURES_TIMEOUT_S": str(timeout_s)})
    for rank in (0, 1):
        r = results[rank]
        print("\nrank %d: all_reduce raised after %.3f s (timeout %d s): %s" % (
            rank, r["seconds"], timeout_s, r["message"][:200]))
        assert re.search(r"\brank 2\b", r["message"]), r["message"]
        assert r["failed"] == [2], r["failed"]
    for rank in (0, 1):
        assert results[rank]["seconds"] < timeout_s / 4, results[rank]


# ---- abort -----------------------------------------------------------------------------------


def abort_waiting_work(rank, world):
    import torch_collective
    gloo = init(timeout_s=GROUP_TIMEOUT_S)
    t = torch.ones(1000)
    dist.all_reduce(t)
    dist.all_reduce(t)
    if rank == 1:
        # Never joins the next all_reduce: waits (on gloo) for rank 0 to be done with its checks.
        dist.barrier(group=gloo)
        report({"done": True})
        dist.destroy_process_group()
        return
    first = dist.all_reduce(torch.ones(1000), async_op=True)  # waits for rank 1 forever
    queued = dist.all_reduce(torch.ones(1000), async_op=True)
    time.sleep(0.5)
    assert not first.is_completed() and not queued.is_completed()
    aborted_at = []

    def abort_soon():
        aborted_at.append(time.monotonic())
        torch_collective.abort()

    timer = threading.Timer(0.5, abort_soon)
    timer.start()
    message, _ = error_text(first.wait)  # blocked here when abort() comes
    latency = time.monotonic() - aborted_at[0]
    timer.join()
    queued_message, queued_seconds = error_text(queued.wait)
    later_message, _ = error_text(lambda: dist.all_reduce(torch.ones(4)))
    torch_collective.abort()  # a second abort is harmless
    report({"message": message, "latency": latency, "queued": queued_message, "queued_seconds": queued_seconds,
            "later": later_message, "first_done": first.is_completed(), "queued_done": queued.is_completed()})
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def test_abort_fails_waiting_and_queued_work():
    start = time.monotonic()
    r = run_ranks(2, "test_failures", "abort_waiting_work", timeout=60)[0]
    print("\nabort: the waiting all_reduce raised %.3f s after abort() (timeout %d s); job %.1f s: %s" % (
        r["latency"], GROUP_TIMEOUT_S, time.monotonic() - start, r["message"][:200]))
    assert r["latency"] < 2.0, r
    assert "RuntimeError" in r["message"] and "abort" in r["message"], r["message"]
    assert "abort" in r["queued"] and r["queued_seconds"] < 1.0, r
    assert "aborted" in r["later"], r["later"]
    assert r["first_done"] and r["queued_done"], r


# ---- destroy and a new default group ---------------------------------------------------------


def threads():
    return len(os.listdir("/proc/self/task"))


def destroy_and_reinit(rank, world, port):
    import gc

    import torch_collective
    before = threads()
    gloo = init()
    sub = dist.new_group(backend="collective")
    t = torch.full((100,), float(rank + 1))
    dist.all_reduce(t)
    u = torch.full((100,), float(rank + 1))
    dist.all_reduce(u, group=sub)
    during = threads()
    dist.destroy_process_group()
    del gloo, sub
    gc.collect()
    after = threads()
    # A new default group in the same processes, through a new store.
    dist.init_process_group("collective", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    v = torch.full((100,), float(rank + 1))
    dist.all_reduce(v)
    w = torch.full((100,), float(rank + 1))
    work = dist.all_reduce(w, op=dist.ReduceOp.MAX, async_op=True)
    work.wait()
    report({"first": t.unique().tolist(), "sub": u.unique().tolist(), "second": v.unique().tolist(),
            "max": w.unique().tolist(), "backend": dist.get_backend(), "threads": [before, during, after],
            "failed": torch_collective.failed_ranks()})
    dist.destroy_process_group()


def test_destroy_then_new_default_group():
    results = run_ranks(2, "test_failures", "destroy_and_reinit", free_port(), timeout=60)
    print("\nthreads per process: before init %d, with the groups %d, after destroy %d" % tuple(results[0]["threads"]))
    for r in results:
        assert r["first"] == r["sub"] == r["second"] == [3.0], r
        assert r["max"] == [2.0], r
        assert r["backend"] == "collective", r
        assert r["failed"] == [], r
        before, during, after = r["threads"]
        # destroy released the groups: their worker and the library's threads ended.
        assert during > before and after < during, r["threads"]


# ---- a group this process is not a member of --------------------------------------------------


def non_member_group(rank, world):
    import torch_collective
    init(timeout_s=GROUP_TIMEOUT_S)
    group = dist.new_group(ranks=[0, 1], backend="collective")
    t = torch.full((16,), float(rank + 1))
    out = {}
    if rank == 2:
        assert group is dist.GroupMember.NON_GROUP_MEMBER
        start = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            returned = dist.all_reduce(t, group=group)
        out["seconds"] = time.monotonic() - start
        out["returned"] = repr(returned)
        out["warnings"] = [str(w.message) for w in caught]
        out["unchanged"] = t.unique().tolist()
        # torch_collective's own functions refuse it with a clear error.
        out["int4"] = error_text(lambda: torch_collective.allreduce_int4(torch.ones(64), group=group))[0]
        out["shrink"] = error_text(lambda: torch_collective.shrink([0], group=group))[0]
        out["failed_ranks"] = error_text(lambda: torch_collective.failed_ranks(group=group))[0]
        out["abort"] = error_text(lambda: torch_collective.abort(group=group))[0]
    else:
        dist.all_reduce(t, group=group)
        out["sum"] = t.unique().tolist()
        # A root outside the group: PyTorch's rank mapping refuses it, and so does the backend
        # when called directly with a group rank it does not have.
        out["dist_root"] = error_text(lambda: dist.broadcast(t, src=2, group=group))[0]
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = 2, 0
        out["backend_root"] = error_text(lambda: group.broadcast([t], opts))[0]
    dist.barrier()
    report(out)
    dist.destroy_process_group()


def test_non_member_group_does_not_hang():
    results = run_ranks(3, "test_failures", "non_member_group", timeout=60)
    for rank in (0, 1):
        r = results[rank]
        assert r["sum"] == [3.0], r
        assert "Global rank 2 is not part of group" in r["dist_root"], r["dist_root"]
        assert "rank 2 is not a member of this group of 2 ranks" in r["backend_root"], r["backend_root"]
    r = results[2]
    # PyTorch 1.13 turns a collective on a group the caller is not in into a warning and a no-op.
    assert r["seconds"] < 1.0 and r["returned"] == "None" and r["unchanged"] == [3.0], r
    assert any("does not belong to the given group" in w for w in r["warnings"]), r["warnings"]
    for name in ("int4", "shrink", "failed_ranks", "abort"):
        assert "not a member" in r[name], (name, r[name])
