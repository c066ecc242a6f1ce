"""Every operation of the "collective" backend checked against PyTorch's gloo in the same job.

One job per world size (2, 3 and 4 processes) runs every check (``run_all``): each rank records
what failed (op, dtype, root and where the tensors differ) instead of stopping at the first
failure, and one pytest test per family of checks asserts on that family's record, so a failing
test names what differed. gloo lacks some dtypes (bfloat16, bool, int16) and ops (AVG,
PREMUL_SUM, reduce_scatter, all_gather_into_tensor, all_to_all lists): the references then run
gloo on an exact stand-in (``gloo_view``) or compose gloo calls (all_reduce then slice, ...).
"""
import contextlib
import time
import zlib

import pytest
import torch
import torch.distributed as dist

from harness import init, report, run_ranks

WORLD_SIZES = (2, 3, 4)
TORCH_MAJOR = int(torch.__version__.split(".")[0])
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
REDUCIBLE = FLOATS + INTS
ANY_DTYPE = REDUCIBLE + [torch.int16, torch.bool, torch.complex64]
# (rtol, atol) where the summation order may differ; values are O(1) and at most 4 ranks add up.
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12), torch.float16: (2e-3, 2e-2),
             torch.bfloat16: (1.6e-2, 1.3e-1), torch.complex64: (1e-5, 1e-5)}
# Reductions and the dtypes each takes (complex via torch's view_as_real; bool only MIN/MAX).
REDUCTIONS = {
    "SUM": REDUCIBLE + [torch.complex64],
    "PRODUCT": REDUCIBLE,
    "MIN": REDUCIBLE + [torch.bool],
    "MAX": REDUCIBLE + [torch.bool],
    "AVG": REDUCIBLE + [torch.complex64],
    "PREMUL_SUM": FLOATS + [torch.int32, torch.complex64],
}
SHAPE = (5, 7)
FACTOR = 2.5  # PREMUL_SUM's factor (integer tensors: INT_FACTOR)
INT_FACTOR = 3.0


# ---- data, references and comparisons -----------------------------------------------------

def data(dtype, shape, rank, salt, op="SUM"):
    """Rank ``rank``'s deterministic input for the check named ``salt``, in a range where ``op``
    stays exact for integers (products of small numbers) and finite for floats."""
    g = torch.Generator().manual_seed(zlib.crc32(salt.encode()) * 64 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        x = torch.rand(shape, generator=g, dtype=torch.float64) + 0.5 if op == "PRODUCT" else \
            torch.randn(shape, generator=g, dtype=torch.float64)
        return x.to(dtype)
    low, high = (-3, 4) if op == "PRODUCT" else (-20, 21)
    return torch.randint(0 if dtype == torch.uint8 else low, high, shape, generator=g).to(dtype)


def gloo_view(t):
    """A copy of t in a dtype gloo handles, holding the same values exactly."""
    if t.is_complex():
        return torch.view_as_real(t).clone()
    return t.to({torch.bfloat16: torch.float32, torch.bool: torch.uint8, torch.int16: torch.int32}.get(t.dtype, t.dtype),
                copy=True)


def from_gloo(t, dtype):
    return torch.view_as_complex(t.contiguous()) if dtype.is_complex else t.to(dtype)


def reduce_op(name, dtype=None, tensor_factor=False):
    """The torch ReduceOp for a name; PREMUL_SUM's factor as a float or a one-element tensor."""
    if name != "PREMUL_SUM":
        return getattr(dist.ReduceOp, name)
    factor = premul_factor(dtype)
    return dist._make_nccl_premul_sum([torch.tensor([factor])] if tensor_factor else factor)


def premul_factor(dtype):
    return FACTOR if dtype.is_floating_point or dtype.is_complex else INT_FACTOR


def gloo_reduced(x, op, gloo, world):
    """What all_reduce(x, op) gives, with gloo (AVG: SUM then / world, integers truncated toward
    zero as libcollective's collAvg does; PREMUL_SUM: each input times the factor, then SUM)."""
    g = gloo_view(x)
    if op == "PREMUL_SUM":
        g = (g * premul_factor(x.dtype)).to(g.dtype)
    dist.all_reduce(g, op=getattr(dist.ReduceOp, "SUM" if op in ("AVG", "PREMUL_SUM") else op), group=gloo)
    result = from_gloo(g, x.dtype)
    if op == "AVG":
        integer = not (x.dtype.is_floating_point or x.dtype.is_complex)
        result = torch.div(result, world, rounding_mode="trunc") if integer else (result / world).to(x.dtype)
    return result


def exact_reduction(op, dtype, world):
    """Whether the result must be bit-exact: integers, MIN/MAX, and 2-rank sums/products (one
    addition or product, commutative); otherwise the summation order may differ."""
    return (not (dtype.is_floating_point or dtype.is_complex) or op in ("MIN", "MAX")
            or (world == 2 and op in ("SUM", "PRODUCT")))


def _show(t):
    return t.reshape(-1)[:8].tolist()


def expect_same(what, got, ref, exact=True):
    """Raises AssertionError naming `what` unless got equals ref (bit-exact, or within the dtype's
    tolerance), with the same dtype and shape."""
    if got.dtype != ref.dtype or got.shape != ref.shape:
        raise AssertionError("%s: got %s%s, expected %s%s" % (what, got.dtype, tuple(got.shape), ref.dtype,
                                                              tuple(ref.shape)))
    if exact:
        bad = got != ref
    else:
        rtol, atol = TOLERANCE[got.dtype]
        real = (lambda t: torch.view_as_real(t).double()) if got.is_complex() else (lambda t: t.double())
        bad = ~torch.isclose(real(got), real(ref), rtol=rtol, atol=atol)
        if got.is_complex():
            bad = bad.any(-1)
    if bad.any():
        index = tuple(i.item() for i in bad.nonzero()[0]) if got.dim() else ()
        raise AssertionError("%s: %d of %d elements %s; first at %s: got %s, expected %s (got %s..., expected %s...)" % (
            what, int(bad.sum()), got.numel(), "differ" if exact else "beyond rtol %g atol %g" % (rtol, atol), index,
            got[index].item(), ref[index].item(), _show(got), _show(ref)))


def expect_all_same(what, got, ref, exact=True):
    if len(got) != len(ref):
        raise AssertionError("%s: %d tensors, expected %d" % (what, len(got), len(ref)))
    for i, (g, r) in enumerate(zip(got, ref)):
        expect_same("%s [%d]" % (what, i), g, r, exact)


def name(dtype):
    return str(dtype).replace("torch.", "")


# ---- the record of one rank ------------------------------------------------------------------

class Checks:
    """One rank's record: per family, how many checks ran and what failed (printed as it fails,
    so a job that hangs later still shows it)."""

    def __init__(self, rank, world, gloo):
        self.rank, self.world, self.gloo = rank, world, gloo
        self.left, self.right = (rank - 1) % world, (rank + 1) % world
        self.record = {}
        self.family = None

    @contextlib.contextmanager
    def case(self, label):
        entry = self.record.setdefault(self.family, {"checks": 0, "failures": []})
        entry["checks"] += 1
        try:
            yield
        except Exception as e:  # noqa: BLE001  a failed check, recorded
            message = "rank %d of %d: %s: %s: %s" % (self.rank, self.world, label, type(e).__name__, e)
            print("FAILED " + message, flush=True)
            entry["failures"].append(message)


FAMILIES = {}


def family(fn):
    """Registers a family of checks (run in order by run_all; one pytest test each)."""
    FAMILIES[fn.__name__] = fn
    return fn


# ---- reductions --------------------------------------------------------------------------

@family
def all_reduce(c):
    """all_reduce with every ReduceOp and dtype (PREMUL_SUM with a float and a tensor factor; AVG
    of integers truncates toward zero) and sizes up to 300k elements, against gloo."""
    cases = [(op, dtype, SHAPE, False) for op, dtypes in REDUCTIONS.items() for dtype in dtypes]
    cases += [("PREMUL_SUM", dtype, SHAPE, True) for dtype in (torch.float32, torch.float16, torch.int32)]
    cases += [(op, dtype, (n,), False) for n in (1, 4099, 300001)
              for op, dtype in (("SUM", torch.float32), ("MAX", torch.int64), ("AVG", torch.bfloat16))]
    for op, dtype, shape, tensor_factor in cases:
        label = "all_reduce %s%s %s %s" % (op, " (tensor factor)" if tensor_factor else "", name(dtype), shape)
        with c.case(label):
            x = data(dtype, shape, c.rank, label, op)
            got = x.clone()
            dist.all_reduce(got, op=reduce_op(op, dtype, tensor_factor))
            expect_same(label, got, gloo_reduced(x, op, c.gloo, c.world), exact_reduction(op, dtype, c.world))
    with c.case("all_reduce PREMUL_SUM int32 with factor 2.5 multiplies by 2 (factor converted to int32)"):
        x = data(torch.int32, SHAPE, c.rank, "premul int")
        got = x.clone()
        dist.all_reduce(got, op=dist._make_nccl_premul_sum(2.5))
        ref = x * 2
        dist.all_reduce(ref, group=c.gloo)
        expect_same("all_reduce PREMUL_SUM(2.5) int32", got, ref)


@family
def all_reduce_coalesced(c):
    """all_reduce_coalesced of tensors of different shapes (one fused call) per op and dtype."""
    shapes = [(3,), (2, 4), (5, 1, 2), ()]
    for op, dtype in (("SUM", torch.float32), ("SUM", torch.int32), ("MAX", torch.float16), ("PRODUCT", torch.int64),
                      ("AVG", torch.float64), ("MIN", torch.bfloat16)):
        label = "all_reduce_coalesced %s %s" % (op, name(dtype))
        with c.case(label):
            xs = [data(dtype, s, c.rank, label + str(i), op) for i, s in enumerate(shapes)]
            got = [x.clone() for x in xs]
            dist.all_reduce_coalesced(got, op=reduce_op(op))
            expect_all_same(label, got, [gloo_reduced(x, op, c.gloo, c.world) for x in xs],
                            exact_reduction(op, dtype, c.world))


@family
def reduce(c):
    """reduce to every root with SUM and MAX; the root's result against gloo."""
    for root in range(c.world):
        for op in ("SUM", "MAX"):
            for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int64):
                label = "reduce %s %s root %d" % (op, name(dtype), root)
                with c.case(label):
                    x = data(dtype, SHAPE, c.rank, label, op)
                    got = x.clone()
                    dist.reduce(got, root, op=reduce_op(op))
                    ref = gloo_reduced(x, op, c.gloo, c.world)
                    if c.rank == root:
                        expect_same(label, got, ref, exact_reduction(op, dtype, c.world))


@family
def reduce_scatter(c):
    """reduce_scatter (list), reduce_scatter_tensor and _reduce_scatter_base against gloo
    all_reduce of the whole input, sliced (gloo has no reduce_scatter)."""
    block = (3, 4)
    for op in ("SUM", "MIN", "AVG"):
        for dtype in REDUCIBLE:
            for api in ("reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base"):
                label = "%s %s %s" % (api, op, name(dtype))
                with c.case(label):
                    x = data(dtype, (c.world * block[0], block[1]), c.rank, label, op)
                    got = torch.zeros(block, dtype=dtype)
                    if api == "reduce_scatter":
                        dist.reduce_scatter(got, list(x.split(block[0])), op=reduce_op(op))
                    else:
                        getattr(dist, api)(got, x, op=reduce_op(op))
                    ref = gloo_reduced(x, op, c.gloo, c.world).split(block[0])[c.rank]
                    expect_same(label, got, ref, exact_reduction(op, dtype, c.world))


# ---- data movement ----------------------------------------------------------------------

@family
def broadcast(c):
    """broadcast from every root, every dtype, bit-exact against gloo."""
    for root in range(c.world):
        for dtype in ANY_DTYPE:
            label = "broadcast %s root %d" % (name(dtype), root)
            with c.case(label):
                got = data(dtype, SHAPE, c.rank, label)
                ref = gloo_view(got)
                dist.broadcast(got, root)
                dist.broadcast(ref, root, group=c.gloo)
                expect_same(label, got, from_gloo(ref, dtype))


@family
def all_gather(c):
    """all_gather (list), all_gather_into_tensor / _all_gather_base (concatenated and stacked
    outputs) and all_gather_coalesced, every dtype, against gloo's all_gather."""
    for dtype in ANY_DTYPE:
        label = "all_gather %s" % name(dtype)
        x = data(dtype, SHAPE, c.rank, label)
        ref = [torch.empty_like(gloo_view(x)) for _ in range(c.world)]
        dist.all_gather(ref, gloo_view(x), group=c.gloo)
        ref = [from_gloo(r, dtype) for r in ref]
        with c.case(label):
            got = [torch.zeros_like(x) for _ in range(c.world)]
            dist.all_gather(got, x)
            expect_all_same(label, got, ref)
        for api, shape in (("all_gather_into_tensor", (c.world * SHAPE[0], SHAPE[1])),
                           ("all_gather_into_tensor", (c.world,) + SHAPE), ("_all_gather_base", (c.world * SHAPE[0], SHAPE[1]))):
            what = "%s %s into %s" % (api, name(dtype), shape)
            with c.case(what):
                got = torch.zeros(shape, dtype=dtype)
                getattr(dist, api)(got, x)
                expect_same(what, got, torch.cat(ref).reshape(shape))
        what = "all_gather_coalesced %s" % name(dtype)
        with c.case(what):
            xs = [x, data(dtype, (3,), c.rank, what), data(dtype, (), c.rank, what + "0d")]
            got = [[torch.zeros_like(t) for t in xs] for _ in range(c.world)]
            dist.all_gather_coalesced(got, xs)
            for i, t in enumerate(xs):
                ref_i = [torch.empty_like(gloo_view(t)) for _ in range(c.world)]
                dist.all_gather(ref_i, gloo_view(t), group=c.gloo)
                expect_all_same("%s tensor %d" % (what, i), [out[i] for out in got], [from_gloo(r, dtype) for r in ref_i])


@family
def all_to_all(c):
    """all_to_all_single with equal blocks, explicit equal splits and uneven splits (some empty),
    and all_to_all of lists with a different size per peer, against gloo all_to_all_single."""
    w, r = c.world, c.rank
    uneven_in = [(r + p) % 3 for p in range(w)]   # rows rank r sends to p
    uneven_out = [(p + r) % 3 for p in range(w)]  # rows p sends to rank r
    list_in = [(r + 2 * p) % 4 for p in range(w)]
    list_out = [(p + 2 * r) % 4 for p in range(w)]
    for dtype in ANY_DTYPE:
        for kind, in_splits, out_splits in (("equal blocks", None, None), ("explicit splits", [2] * w, [2] * w),
                                            ("uneven splits", uneven_in, uneven_out)):
            label = "all_to_all_single %s %s" % (kind, name(dtype))
            with c.case(label):
                x = data(dtype, (sum(in_splits or [2] * w), 3), r, label)
                got = torch.zeros((sum(out_splits or [2] * w), 3), dtype=dtype)
                dist.all_to_all_single(got, x, out_splits, in_splits)
                ref = gloo_view(got)
                dist.all_to_all_single(ref, gloo_view(x), out_splits, in_splits, group=c.gloo)
                expect_same(label, got, from_gloo(ref, dtype))
        label = "all_to_all lists %s" % name(dtype)
        with c.case(label):
            xs = [data(dtype, (n, 3), r, label + str(p)) for p, n in enumerate(list_in)]
            got = [torch.zeros((n, 3), dtype=dtype) for n in list_out]
            dist.all_to_all(got, xs)
            ref = gloo_view(torch.cat(got))
            dist.all_to_all_single(ref, gloo_view(torch.cat(xs)), list_out, list_in, group=c.gloo)
            expect_all_same(label, got, list(from_gloo(ref, dtype).split(list_out)))


@family
def gather_scatter(c):
    """gather to and scatter from every root, every dtype, against gloo."""
    for root in range(c.world):
        for dtype in ANY_DTYPE:
            label = "gather %s root %d" % (name(dtype), root)
            with c.case(label):
                x = data(dtype, SHAPE, c.rank, label)
                got = [torch.zeros_like(x) for _ in range(c.world)] if c.rank == root else None
                dist.gather(x, got, root)
                ref = [torch.empty_like(gloo_view(x)) for _ in range(c.world)] if c.rank == root else None
                dist.gather(gloo_view(x), ref, root, group=c.gloo)
                if c.rank == root:
                    expect_all_same(label, got, [from_gloo(t, dtype) for t in ref])
            label = "scatter %s root %d" % (name(dtype), root)
            with c.case(label):
                xs = [data(dtype, SHAPE, p, label) for p in range(c.world)] if c.rank == root else None
                got = torch.zeros(SHAPE, dtype=dtype)
                dist.scatter(got, xs, root)
                ref = gloo_view(got)
                dist.scatter(ref, [gloo_view(t) for t in xs] if xs else None, root, group=c.gloo)
                expect_same(label, got, from_gloo(ref, dtype))


# ---- point to point ---------------------------------------------------------------------
# Ungrouped sends and receives go around the whole ring; a send/recv that some ranks sit out is
# test_unpaired_point_to_point_three_ranks.

def messages(rank, salt):
    """What a rank sends its right neighbour: tagged messages of several dtypes, one of 4 MB, one
    empty."""
    return [(5, data(torch.float32, SHAPE, rank, salt + "a")), (9, data(torch.int16, (3,), rank, salt + "b")),
            (0, data(torch.float32, (1 << 20,), rank, salt + "c")), (2, data(torch.bfloat16, (0,), rank, salt + "d"))]


def parity_order(rank, send, recv):
    """Posts a ring's sends and receives, even ranks sending first and odd ranks receiving first
    (as with NCCL, receives posted first on every rank would wait for each other); returns what
    they returned, in posting order."""
    return [send(), recv()] if rank % 2 == 0 else [recv(), send()]


def ring(c, group, post_send, post_recv, salt):
    """Sends messages() to the right neighbour and receives the left one's; returns what arrived."""
    outgoing = messages(c.rank, salt)
    incoming = [torch.zeros_like(t) for _, t in outgoing]
    works = parity_order(c.rank, lambda: [post_send(t, c.right, group=group, tag=tag) for tag, t in outgoing],
                         lambda: [post_recv(t, c.left, group=group, tag=tag) for (tag, _), t in zip(outgoing, incoming)])
    for work in works[0] + works[1]:
        if hasattr(work, "wait"):  # isend/irecv's Work (blocking send/recv return None or a rank)
            work.wait()
    return incoming


def ring_blocking(c, group):
    """Blocking send/recv with tags around the ring."""
    return ring(c, group, dist.send, dist.recv, "ring")


def ring_async(c, group):
    """isend/irecv with tags around the ring, all posted before any is waited for."""
    return ring(c, group, dist.isend, dist.irecv, "iring")


def ring_batch(c, group):
    """batch_isend_irecv around the ring with every rank listing its sends first: 8 MB to the
    right, and messages of different sizes both ways; returns what arrived."""
    big = data(torch.float32, (1 << 21,), c.rank, "batch big")
    to_right, to_left = data(torch.int64, (3,), c.rank, "batch r"), data(torch.float64, (5,), c.rank, "batch l")
    incoming = [torch.zeros_like(big), torch.zeros_like(to_right), torch.zeros_like(to_left)]
    ops = [dist.P2POp(dist.isend, big, c.right, group), dist.P2POp(dist.isend, to_right, c.right, group),
           dist.P2POp(dist.isend, to_left, c.left, group), dist.P2POp(dist.irecv, incoming[0], c.left, group),
           dist.P2POp(dist.irecv, incoming[1], c.left, group), dist.P2POp(dist.irecv, incoming[2], c.right, group)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return incoming


@family
def point_to_point(c):
    """send/recv with tags (blocking), isend/irecv all posted at once, and batch_isend_irecv with
    every rank sending first (no deadlock), against the same on gloo."""
    for run in (ring_blocking, ring_async, ring_batch):
        with c.case(run.__name__):
            expect_all_same(run.__name__, run(c, None), run(c, c.gloo))


# ---- barrier, Work objects ----------------------------------------------------------------

@family
def barrier(c):
    """barrier (blocking and async) holds every rank until the last one (rank 0, 0.3 s late)
    arrives: every rank leaves after every rank entered."""
    for async_op in (False, True):
        with c.case("barrier async_op=%s" % async_op):
            if c.rank == 0:
                time.sleep(0.3)
            entered = time.time()
            work = dist.barrier(async_op=async_op)
            if async_op:
                work.wait()
            left = time.time()
            times = [torch.zeros(2, dtype=torch.float64) for _ in range(c.world)]
            dist.all_gather(times, torch.tensor([entered, left], dtype=torch.float64), group=c.gloo)
            last_entry, first_exit = max(t[0].item() for t in times), min(t[1].item() for t in times)
            assert first_exit >= last_entry, "a rank left the barrier %.3f s before the last one entered" % (
                last_entry - first_exit)


@family
def work_objects(c):
    """Work of async ops: wait(), is_completed() turning True without wait(), exception() None,
    get_future() (and then()) giving the output tensors; 40 ops in flight waited in order."""
    x = data(torch.float32, SHAPE, c.rank, "work")
    ref = gloo_reduced(x, "SUM", c.gloo, c.world)
    with c.case("Work of all_reduce: wait, is_completed, exception, future"):
        got = x.clone()
        work = dist.all_reduce(got, async_op=True)
        assert work.wait() is True, "wait() did not return True"
        assert work.is_completed(), "is_completed() is False after wait()"
        if TORCH_MAJOR >= 2:
            assert work.exception() is None, "exception() is %r after success" % work.exception()
        else:  # 1.13's binding cannot return exception() for any backend (gloo's too: TypeError)
            assert work.is_success(), "is_success() is False after success"
        value = work.get_future().wait()
        assert isinstance(value, list) and len(value) == 1, "future value %r is not [tensor]" % (value,)
        expect_same("future value", value[0], ref, c.world == 2)
        assert value[0].data_ptr() == got.data_ptr(), "the future's tensor is not the all_reduce's tensor"
        expect_same("work.result()", work.result()[0], ref, c.world == 2)
    with c.case("is_completed() turns True without wait()"):
        work = dist.all_reduce(x.clone(), async_op=True)
        deadline = time.time() + 30
        while not work.is_completed() and time.time() < deadline:
            time.sleep(0.001)
        assert work.is_completed(), "is_completed() still False after 30 s"
    with c.case("get_future().then() chains on the result"):
        doubled = dist.all_reduce(x.clone(), async_op=True).get_future().then(lambda f: f.value()[0] * 2).wait()
        expect_same("then() result", doubled, ref * 2, c.world == 2)
    with c.case("future of all_gather holds the output list"):
        outs = [torch.zeros_like(x) for _ in range(c.world)]
        value = dist.all_gather(outs, x, async_op=True).get_future().wait()
        assert len(value) == c.world and all(v.data_ptr() == o.data_ptr() for v, o in zip(value, outs)), \
            "the future's tensors are not the output list"
    with c.case("40 async ops in flight, waited in order"):
        ops = []
        for i in range(40):
            t = data(torch.int64, (i + 1,), c.rank, "inflight%d" % i)
            if i % 3 == 2:
                ops.append(("broadcast %d" % i, dist.broadcast(t, i % c.world, async_op=True), t,
                            data(torch.int64, (i + 1,), i % c.world, "inflight%d" % i)))
            else:
                ops.append(("all_reduce %d" % i, dist.all_reduce(t.clone(), async_op=True), None,
                            gloo_reduced(t, "SUM", c.gloo, c.world)))
        for what, work, tensor, expected in ops:
            work.wait()
            expect_same(what, tensor if tensor is not None else work.result()[0], expected)


# ---- sub-groups ---------------------------------------------------------------------------

GROUPS = {2: [[1], [0, 1]], 3: [[0, 2], [1, 2]], 4: [[0, 2], [1, 2, 3]]}


@family
def sub_groups(c):
    """new_group sub-groups (a one-rank group at 2 ranks; overlapping groups): members run
    collectives and a batch_isend_irecv ring (global ranks) against gloo or the members' data;
    other ranks call nothing."""
    groups = [(ranks, dist.new_group(ranks), dist.new_group(ranks, backend="gloo")) for ranks in GROUPS[c.world]]
    for ranks, group, ref_group in groups:
        if c.rank not in ranks:
            assert group == dist.GroupMember.NON_GROUP_MEMBER
            continue
        me, n = ranks.index(c.rank), len(ranks)
        prefix = "group %s: " % ranks
        with c.case(prefix + "rank and size"):
            assert (dist.get_rank(group), dist.get_world_size(group)) == (me, n), (dist.get_rank(group),
                                                                                 dist.get_world_size(group))
        for dtype in (torch.float32, torch.int64):
            label = prefix + "all_reduce SUM " + name(dtype)
            with c.case(label):
                x = data(dtype, SHAPE, c.rank, label)
                got = x.clone()
                dist.all_reduce(got, group=group)
                expect_same(label, got, gloo_reduced(x, "SUM", ref_group, n), exact_reduction("SUM", dtype, n))
        with c.case(prefix + "broadcast from global rank %d" % ranks[-1]):
            got = data(torch.int32, SHAPE, c.rank, "group bcast")
            dist.broadcast(got, ranks[-1], group=group)
            expect_same(prefix + "broadcast", got, data(torch.int32, SHAPE, ranks[-1], "group bcast"))
        with c.case(prefix + "all_gather"):
            x = data(torch.float16, SHAPE, c.rank, "group ag")
            got = [torch.zeros_like(x) for _ in ranks]
            dist.all_gather(got, x, group=group)
            expect_all_same(prefix + "all_gather", got, [data(torch.float16, SHAPE, p, "group ag") for p in ranks])
        with c.case(prefix + "reduce_scatter_tensor MAX"):
            x = data(torch.int32, (n * 2, 3), c.rank, "group rs")
            got = torch.zeros((2, 3), dtype=torch.int32)
            dist.reduce_scatter_tensor(got, x, op=dist.ReduceOp.MAX, group=group)
            expect_same(prefix + "reduce_scatter_tensor", got, gloo_reduced(x, "MAX", ref_group, n).split(2)[me])
        with c.case(prefix + "gather to global rank %d" % ranks[0]):
            x = data(torch.int64, (4,), c.rank, "group gather")
            got = [torch.zeros_like(x) for _ in ranks] if me == 0 else None
            dist.gather(x, got, ranks[0], group=group)
            if me == 0:
                expect_all_same(prefix + "gather", got, [data(torch.int64, (4,), p, "group gather") for p in ranks])
        with c.case(prefix + "batch_isend_irecv around the group's ring"):
            right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
            got = torch.zeros(6, dtype=torch.float64)
            sent = data(torch.float64, (6,), c.rank, "group ring")
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, right, group),
                                                dist.P2POp(dist.irecv, got, left, group)]):
                work.wait()
            expect_same(prefix + "recv from %d" % left, got, data(torch.float64, (6,), left, "group ring"))
        with c.case(prefix + "barrier"):
            dist.barrier(group=group)


# ---- layouts: non-contiguous and empty tensors --------------------------------------------

def layout_ops(w, r, rows):
    """Per op: (input shapes, output shapes, call(ins, outs)) with blocks of `rows` x 7 (0: empty
    tensors). A tensor in both roles (all_reduce's) is an output; reduce's is an output on the root
    only (elsewhere c10d leaves it unspecified, so it is checked as an input: unchanged)."""
    s = (rows, 7)
    big = (w * rows, 7)
    split_in = [(r + p) % 3 * rows // 4 for p in range(w)]
    split_out = [(p + r) % 3 * rows // 4 for p in range(w)]
    left, right = (r - 1) % w, (r + 1) % w
    nested = lambda outs: [outs[i:i + 2] for i in range(0, len(outs), 2)]
    return {
        "all_reduce": ([], [s], lambda i, o: dist.all_reduce(o[0])),
        "all_reduce_coalesced": ([], [s, (rows, 3)], lambda i, o: dist.all_reduce_coalesced(o)),
        "broadcast": ([], [s], lambda i, o: dist.broadcast(o[0], w - 1)),
        "reduce": (([s], []) if r else ([], [s])) + (lambda i, o: dist.reduce((o or i)[0], 0),),
        "all_gather": ([s], [s] * w, lambda i, o: dist.all_gather(o, i[0])),
        "all_gather_into_tensor": ([s], [big], lambda i, o: dist.all_gather_into_tensor(o[0], i[0])),
        "all_gather_coalesced": ([s, (rows, 2)], [s, (rows, 2)] * w,
                                 lambda i, o: dist.all_gather_coalesced(nested(o), i)),
        "reduce_scatter": ([s] * w, [s], lambda i, o: dist.reduce_scatter(o[0], i)),
        "reduce_scatter_tensor": ([big], [s], lambda i, o: dist.reduce_scatter_tensor(o[0], i[0])),
        "all_to_all_single": ([big], [big], lambda i, o: dist.all_to_all_single(o[0], i[0])),
        "all_to_all_single uneven": ([(sum(split_in), 7)], [(sum(split_out), 7)],
                                     lambda i, o: dist.all_to_all_single(o[0], i[0], split_out, split_in)),
        "all_to_all": ([s] * w, [s] * w, lambda i, o: dist.all_to_all(o, i)),
        "gather": ([s], [s] * w if r == 0 else [], lambda i, o: dist.gather(i[0], o or None, 0)),
        "scatter": ([s] * w if r == w - 1 else [], [s], lambda i, o: dist.scatter(o[0], i or None, w - 1)),
        "isend/irecv": ([s, s], [s, s], lambda i, o: [x.wait() for x in sum(parity_order(
            r, lambda: [dist.isend(t, right) for t in i], lambda: [dist.irecv(t, left) for t in o]), [])]),
        "batch_isend_irecv": ([s], [s], lambda i, o: [x.wait() for x in dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, i[0], right), dist.P2POp(dist.irecv, o[0], left)])]),
    }


def strided(shape, dtype, salt, rank, transposed):
    """A non-contiguous view of `shape` into a bigger base filled with data: (base, view). The
    view is every other column of the base, or a transposed base."""
    if transposed:
        base = data(dtype, shape[::-1], rank, salt)
        return base, base.t()
    base = data(dtype, shape[:-1] + (2 * shape[-1],), rank, salt)
    return base, base[..., ::2]


def outside(base, view):
    """The base's elements that the view does not cover."""
    mask = torch.ones_like(base, dtype=torch.bool)
    mask.as_strided(view.shape, view.stride(), view.storage_offset() - base.storage_offset()).fill_(False)
    return base[mask]


@family
def non_contiguous(c):
    """Every op with strided and transposed views as inputs and outputs: results land in the views
    (as with contiguous tensors), inputs stay unchanged, and nothing else of the bases changes."""
    for op, (in_shapes, out_shapes, call) in layout_ops(c.world, c.rank, 5).items():
        for dtype in (torch.float32, torch.int16):
            if op.startswith(("all_reduce", "reduce")) and dtype == torch.int16:
                dtype = torch.int32  # int16 cannot be reduced
            label = "%s %s non-contiguous" % (op, name(dtype))
            with c.case(label):
                shapes = in_shapes + out_shapes
                views = [strided(s, dtype, label + str(k), c.rank, k % 2 == 1) for k, s in enumerate(shapes)]
                bases_before = [base.clone() for base, _ in views]
                dense = [v.contiguous() for _, v in views]
                call([v for _, v in views[:len(in_shapes)]], [v for _, v in views[len(in_shapes):]])
                call(dense[:len(in_shapes)], dense[len(in_shapes):])
                for k, ((base, view), before) in enumerate(zip(views, bases_before)):
                    role = "input %d" % k if k < len(in_shapes) else "output %d" % (k - len(in_shapes))
                    expect_same("%s: %s (as with contiguous tensors)" % (label, role), view, dense[k])
                    if k < len(in_shapes):
                        expect_same("%s: %s unchanged" % (label, role), base, before)
                    expect_same("%s: %s's base outside the view" % (label, role), outside(base, view),
                                outside(before, view))


@family
def empty_tensors(c):
    """Every op with empty tensors (0 rows) completes, and the group stays in step afterwards."""
    for op, (in_shapes, out_shapes, call) in layout_ops(c.world, c.rank, 0).items():
        label = "%s with empty tensors" % op
        with c.case(label):
            ins = [torch.zeros(s) for s in in_shapes]
            outs = [torch.zeros(s) for s in out_shapes]
            call(ins, outs)
            assert [t.shape for t in ins + outs] == [torch.Size(s) for s in in_shapes + out_shapes]
    with c.case("all_reduce after the empty ops"):
        got = torch.tensor([c.rank + 1])
        dist.all_reduce(got)
        expect_same("all_reduce after the empty ops", got, torch.tensor([c.world * (c.world + 1) // 2]))


# ---- the job and the tests ----------------------------------------------------------------

def run_all(rank, world):
    """Runs every family on this rank; reports {family: {"checks": n, "failures": [...]}}."""
    checks = Checks(rank, world, init())
    for fname, fn in FAMILIES.items():
        checks.family = fname
        checks.record[fname] = {"checks": 0, "failures": []}
        with checks.case("%s (unexpected error outside a check)" % fname):
            fn(checks)
    report(checks.record)
    dist.destroy_process_group()


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda w: "%dranks" % w)
def job(request):
    return run_ranks(request.param, "test_operations", "run_all", timeout=240)


@pytest.mark.parametrize("fname", list(FAMILIES))
def test_operation(job, fname):
    """The family's checks ran on every rank and none failed (see the family's docstring)."""
    records = [r[fname] for r in job]
    failures = [f for r in records for f in r["failures"]]
    assert not failures, "%s (%s):\n%s" % (fname, FAMILIES[fname].__doc__, "\n".join(failures))
    assert all(r["checks"] > 0 for r in records), "some rank ran no %s check" % fname


def unpaired_point_to_point(rank, world):
    """Rank 0 sends rank 1 a tensor while rank 2 sits out, then every rank all_reduces."""
    init(timeout_s=10)
    got = torch.zeros(3)
    if rank == 0:
        dist.send(torch.full((3,), 7.0), 1)
    elif rank == 1:
        dist.recv(got, 0)
    total = torch.ones(2)
    dist.all_reduce(total)
    report({"recv": got.tolist(), "sum": total.tolist()})
    dist.destroy_process_group()


def test_unpaired_point_to_point_three_ranks():
    """A send/recv between two of three ranks, then an all_reduce of all three (valid with NCCL and
    gloo), completes with the right values."""
    results = run_ranks(3, "test_operations", "unpaired_point_to_point", timeout=60)
    assert results[1]["recv"] == [7.0] * 3, results
    assert all(r["sum"] == [3.0, 3.0] for r in results), results
