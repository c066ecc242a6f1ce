"""Bad input to the "collective" backend raises a Python exception naming the problem, on the
calling rank, without a hang, and leaves the group usable; with COLL_CHECK=1 (docs/KNOBS.md:
ranks compare each collective's kind, count, dtype, op and root first) calls that disagree across
ranks raise on every rank instead of hanging."""
import re

import pytest
import torch
import torch.distributed as dist

from harness import init, report, run_ranks
from test_operations import Checks


def expect_error(c, label, pattern, call):
    """Checks that call() raises RuntimeError or ValueError whose message matches pattern."""
    with c.case(label):
        try:
            result = call()
            if hasattr(result, "wait"):
                result.wait()
        except (RuntimeError, ValueError) as e:
            assert re.search(pattern, str(e)), "message %r does not match %r" % (str(e), pattern)
        else:
            raise AssertionError("no exception (expected one matching %r)" % pattern)


def still_in_step(c, label):
    """An all_reduce of every rank gives the right sum: no rank is left inside a failed call."""
    with c.case(label):
        got = torch.tensor([c.rank + 1])
        dist.all_reduce(got)
        assert got.item() == c.world * (c.world + 1) // 2, got


def bad_arguments(rank, world):
    """Every rank makes the same bad call (the backend refuses it before any data moves); the
    root-only checks of gather and scatter run on the root alone."""
    c = Checks(rank, world, init())
    c.family = "bad_arguments"
    x = torch.ones(6)
    nonmember = "rank %d is not a member of this group of %d ranks" % (world, world)
    expect_error(c, "all_reduce int16", "dtype Short cannot be reduced",
                 lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)))
    for op in ("BAND", "BOR", "BXOR"):
        expect_error(c, "all_reduce " + op, "reduce op %s is not supported" % op,
                     lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=getattr(dist.ReduceOp, op)))
    expect_error(c, "all_reduce bool SUM", "bool tensors reduce with MAX or MIN only",
                 lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool)))
    expect_error(c, "reduce complex64 MAX", "complex tensors reduce with SUM, AVG or PREMUL_SUM only",
                 lambda: dist.reduce(torch.ones(4, dtype=torch.complex64), 0, op=dist.ReduceOp.MAX))
    expect_error(c, "all_reduce PREMUL_SUM with a 2-element factor", "PREMUL_SUM factor must be one number",
                 lambda: dist.all_reduce(x.clone(), op=dist._make_nccl_premul_sum([torch.ones(2)])))
    expect_error(c, "reduce_scatter_tensor int16", "dtype Short cannot be reduced",
                 lambda: dist.reduce_scatter_tensor(torch.ones(2, dtype=torch.int16),
                                                    torch.ones(2 * world, dtype=torch.int16)))
    expect_error(c, "send to rank world_size", "send destination: " + nonmember, lambda: dist.send(x, world))
    expect_error(c, "isend to rank world_size", "send destination: " + nonmember, lambda: dist.isend(x, world))
    expect_error(c, "recv from rank world_size", "recv source: " + nonmember, lambda: dist.recv(x, world))
    expect_error(c, "recv from any source", "recv from any source is not supported", lambda: dist.recv(x))
    expect_error(c, "broadcast from rank world_size", "broadcast root: " + nonmember,
                 lambda: dist.broadcast(x, world))
    expect_error(c, "reduce to rank world_size", "reduce root: " + nonmember, lambda: dist.reduce(x, world))
    expect_error(c, "all_gather into %d tensors" % (world + 1), "allgather needs one list of %d output tensors" % world,
                 lambda: dist.all_gather([torch.empty(6) for _ in range(world + 1)], x))
    expect_error(c, "all_gather into tensors of 5 elements", "every output tensor must have 6 elements, got 5",
                 lambda: dist.all_gather([torch.empty(5) for _ in range(world)], x))
    expect_error(c, "all_gather into int32 tensors", "different dtypes",  # torch's own check
                 lambda: dist.all_gather([torch.empty(6, dtype=torch.int32) for _ in range(world)], x))
    expect_error(c, "all_gather_into_tensor too small", "the output must hold %d x 6 elements, it holds 6" % world,
                 lambda: dist.all_gather_into_tensor(torch.empty(6), x))
    expect_error(c, "all_gather_into_tensor dtype mismatch", "output dtype Int differs from input dtype Float",
                 lambda: dist.all_gather_into_tensor(torch.empty(6 * world, dtype=torch.int32), x))
    expect_error(c, "reduce_scatter with %d inputs" % (world + 1), "reduce_scatter needs one list of %d input" % world,
                 lambda: dist.reduce_scatter(torch.empty(6), [x] * (world + 1)))
    expect_error(c, "reduce_scatter_tensor input too small", "the input must hold %d x 6 elements" % world,
                 lambda: dist.reduce_scatter_tensor(torch.empty(6), x))
    expect_error(c, "all_to_all_single rows not a multiple", "has %d rows, not a multiple of the group size %d" % (
        world + 1, world), lambda: dist.all_to_all_single(torch.empty(world + 1), torch.ones(world + 1)))
    expect_error(c, "all_to_all_single splits not adding up", "input split sizes add up to %d rows, the tensor has %d" % (
        world, world + 1), lambda: dist.all_to_all_single(torch.empty(world + 1), torch.ones(world + 1),
                                                          [1] * world, [1] * world))
    expect_error(c, "all_to_all_single with too few splits", "split sizes need %d entries, got 1" % world,
                 lambda: dist.all_to_all_single(torch.empty(world), torch.ones(world), [world], [world]))
    expect_error(c, "all_to_all with %d tensors" % (world - 1),
                 "all_to_all needs %d input and %d output tensors" % (world, world),
                 lambda: dist.all_to_all([torch.empty(1)] * (world - 1), [torch.ones(1)] * (world - 1)))
    expect_error(c, "all_reduce_coalesced of mixed dtypes", "different dtypes",  # torch's own check
                 lambda: dist.all_reduce_coalesced([torch.ones(2), torch.ones(2, dtype=torch.int64)]))
    if rank == 0:  # the root's own checks: the others do not call
        expect_error(c, "gather into %d tensors on the root" % (world - 1), "gather needs one list of %d output" % world,
                     lambda: dist.gather(x, [torch.empty(6)] * (world - 1), 0))
        expect_error(c, "scatter of tensors of 5 elements", "every input tensor must have 6 elements, got 5",
                     lambda: dist.scatter(torch.empty(6), [torch.ones(5)] * world, 0))
    still_in_step(c, "all_reduce after the refused calls")
    # A receive that meets a message of another tag fails on the receiver (the sender's call
    # succeeds). Two ranks: both make the one point-to-point call (see test_operations).
    with c.case("recv with tag 2 meeting a send with tag 1"):
        if rank == 0:
            dist.send(x, 1, tag=1)
        elif rank == 1:
            work = dist.irecv(torch.empty(6), 0, tag=2)
            try:
                work.wait()
            except RuntimeError as e:
                assert "recv from rank 0 with tag 2 of 24 bytes met a message sent with tag 1 of 24 bytes" in str(e), e
                assert work.is_completed() and not work.is_success(), "the failed Work is not completed/unsuccessful"
            else:
                raise AssertionError("no exception")
    report(c.record)
    dist.destroy_process_group()


def mismatched_calls(rank, world):
    """With COLL_CHECK=1, collectives that differ across ranks (count, op, root) raise on every
    rank, naming the disagreement; the group stays usable."""
    c = Checks(rank, world, init())
    c.family = "mismatched_calls"
    last = rank == world - 1
    expect_error(c, "all_reduce with 9 elements on the last rank, 8 elsewhere", r"COLL_CHECK: ranks disagree on the count",
                 lambda: dist.all_reduce(torch.ones(9 if last else 8)))
    still_in_step(c, "all_reduce after the size mismatch")
    expect_error(c, "all_reduce MAX on the last rank, SUM elsewhere", r"COLL_CHECK: ranks disagree on the reduction op",
                 lambda: dist.all_reduce(torch.ones(8), op=dist.ReduceOp.MAX if last else dist.ReduceOp.SUM))
    expect_error(c, "broadcast from different roots", r"COLL_CHECK: ranks disagree on the root",
                 lambda: dist.broadcast(torch.ones(8), 1 if last else 0))
    still_in_step(c, "all_reduce after the op and root mismatches")
    report(c.record)
    dist.destroy_process_group()


def assert_clean(results, what):
    failures = [f for r in results for f in r[what]["failures"]]
    assert not failures, "\n".join(failures)
    assert all(r[what]["checks"] > 0 for r in results), results


def test_bad_arguments_raise_with_clear_messages():
    """Unsupported dtypes and ops, ranks outside the group, wrong list lengths and sizes, split
    sizes, any-source receives and tag mismatches raise naming the problem; the group goes on."""
    assert_clean(run_ranks(2, "test_bad_input", "bad_arguments", timeout=90), "bad_arguments")


@pytest.mark.parametrize("world", [3])
def test_coll_check_reports_mismatched_calls(world):
    """COLL_CHECK=1: an all_reduce whose size differs on one rank (then op, then root) raises on
    every rank instead of hanging."""
    results = run_ranks(world, "test_bad_input", "mismatched_calls", timeout=90, env={"COLL_CHECK": "1"})
    assert_clean(results, "mismatched_calls")
