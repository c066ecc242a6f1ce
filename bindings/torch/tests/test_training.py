"""DDP training on the "collective" backend: the same run as on gloo (parameters equal to float
tolerance), several gradient buckets, rank 0's initial parameters broadcast to ranks that start
from different ones; and the 4-bit comm hook (torch_collective.int4_hook): loss close to the
float32 run's, one residual per bucket, and evidence that the buckets really went compressed."""
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch_collective
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import init, report, run_ranks

WORLD = 3
STEPS = 250
BATCH = 32
SHARD = 512
LR = 0.05
# Small buckets: about 2,600 float32 gradients each, and a first bucket (DDP's separate limit,
# 1 MiB by default, which would take this whole model) of 2 KiB: the model below makes 4 buckets.
BUCKET_CAP_MB = 0.01
FIRST_BUCKET_BYTES = 2048
IN, HIDDEN, OUT = 32, 64, 8
BLOCK = 64  # the int4 hook's block size (one bfloat16 scale per block)


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def make_shard(rank):
    """This rank's shard of a deterministic regression data set: a fixed random teacher network
    (the same on every rank) plus noise, so the loss settles at a floor well above zero."""
    g = torch.Generator().manual_seed(12345)
    teacher = [torch.randn(IN, HIDDEN, generator=g) / IN ** 0.5, torch.randn(HIDDEN, OUT, generator=g) / HIDDEN ** 0.5]
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(SHARD, IN, generator=g)
    y = torch.tanh(x @ teacher[0]) @ teacher[1] + 0.1 * torch.randn(SHARD, OUT, generator=g)
    return x, y


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


class Trainer:
    """SGD with momentum over the shard in a fixed order."""

    def __init__(self, model, x, y):
        self.model, self.x, self.y, self.step_count, self.seconds = model, x, y, 0, 0.0
        self.opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)

    def step(self):
        start = time.monotonic()
        i = (self.step_count * BATCH) % SHARD
        self.opt.zero_grad()
        loss = nn.functional.mse_loss(self.model(self.x[i:i + BATCH]), self.y[i:i + BATCH])
        loss.backward()
        self.opt.step()
        self.step_count += 1
        self.seconds += time.monotonic() - start
        return loss.item()


def train(model, x, y, steps=STEPS):
    trainer = Trainer(model, x, y)
    for _ in range(steps):
        trainer.step()
    return trainer


def full_loss(model, x, y, gloo):
    """The training loss over every rank's whole shard (the mean of the ranks' means)."""
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(x), y).reshape(1)
    dist.all_reduce(loss, group=gloo)
    return loss.item() / dist.get_world_size()


def gather(t, gloo):
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t, group=gloo)
    return out


def ddp(model, group, gloo):
    """DDP over group with small buckets; checks that the ranks started from different parameters
    and that DDP's constructor replaced them with rank 0's."""
    dist._DEFAULT_FIRST_BUCKET_BYTES = FIRST_BUCKET_BYTES
    before = flat_params(model)
    everyone = gather(before, gloo)
    assert all(not torch.equal(everyone[0], other) for other in everyone[1:]), "ranks should start apart"
    wrapped = DDP(model, process_group=group, bucket_cap_mb=BUCKET_CAP_MB)
    after = flat_params(wrapped.module)
    assert torch.equal(after, everyone[0]), ("rank %d does not hold rank 0's initial parameters after DDP's "
                                             "broadcast (max diff %g)" % (dist.get_rank(),
                                                                           (after - everyone[0]).abs().max()))
    return wrapped


def bucket_sizes(wrapped):
    """The gradient buckets' sizes in bytes after DDP rebuilt them (in the order of the first backward)."""
    data = wrapped._get_ddp_logging_data()
    assert data.get("has_rebuilt_buckets") == 1, data
    return [int(s) for s in str(data.get("rebuilt_bucket_sizes", "")).split(",") if s.strip()]


def replicas_spread(model, gloo):
    """The largest difference between this rank's parameters and any other rank's."""
    mine = flat_params(model)
    return max((mine - other).abs().max().item() for other in gather(mine, gloo))


def ddp_matches_gloo(rank, world):
    torch.set_num_threads(1)
    gloo = init()
    x, y = make_shard(rank)
    # The same training on both backends, in lockstep (two DDP models, one per group), from the
    # same per-rank starting points.
    ours = ddp(make_model(seed=100 + rank), None, gloo)
    ref = ddp(make_model(seed=100 + rank), gloo, gloo)
    a, b = Trainer(ours, x, y), Trainer(ref, x, y)
    diffs = []
    for _ in range(STEPS):
        a.step()
        b.step()
        diffs.append((flat_params(ours.module) - flat_params(ref.module)).abs().max().item())
    pa = flat_params(ours.module)
    report({"diffs": diffs, "buckets": bucket_sizes(ours), "gloo_buckets": bucket_sizes(ref),
            "numel": pa.numel(), "loss": full_loss(ours.module, x, y, gloo),
            "gloo_loss": full_loss(ref.module, x, y, gloo),
            "spread": replicas_spread(ours.module, gloo), "seconds": a.seconds, "gloo_seconds": b.seconds,
            "moved": (pa - flat_params(make_model(100))).abs().max().item()})
    dist.destroy_process_group()


def test_ddp_matches_gloo():
    results = run_ranks(WORLD, "test_training", "ddp_matches_gloo", timeout=150)
    r = results[0]
    print("\nmax |collective - gloo| over %d parameters: %.3g after step 1, %.3g after %d steps (loss %.5f vs %.5f; "
          "%.1f s vs %.1f s; buckets %s bytes)" % (r["numel"], r["diffs"][0], r["diffs"][-1], STEPS, r["loss"],
                                                  r["gloo_loss"], r["seconds"], r["gloo_seconds"], r["buckets"]))
    # Training did something: the parameters moved well away from rank 0's start.
    assert r["moved"] > 0.05, r
    for res in results:
        # One step differs by float rounding only (the sums of three ranks' gradients in another
        # order); 250 steps with momentum amplify that a little, no more.
        assert res["diffs"][0] <= 1e-6, res["diffs"][:5]
        assert max(res["diffs"]) <= 1e-4, res["diffs"]
        # The replicas agree with each other (every rank got the same All-Reduce result).
        assert res["spread"] == 0.0, res
    # Gradients went in several buckets, covering every parameter.
    assert len(r["buckets"]) >= 4, r["buckets"]
    assert sum(r["buckets"]) == r["numel"] * 4, (r["buckets"], r["numel"])
    assert r["buckets"] == r["gloo_buckets"]
    assert abs(r["loss"] - r["gloo_loss"]) <= 1e-4 * r["gloo_loss"], r


# ---- the int4 comm hook ----------------------------------------------------------------------
# The buckets above hold 520 to 4,160 gradients (2 to 16 KiB), below the library's default
# minimum for compression (COLL_COMPRESS_MIN_BYTES, 64 KiB), so the compressed runs pass
# min_bytes=1024 (every bucket compressed); the run with the default minimum shows the fallback.
MIN_BYTES = 1024


def int4_blocks_distinct(tensor):
    """The most distinct values in one block of BLOCK elements (from the bucket's start): a bucket
    that went through the 4-bit format holds at most 15 (-7..+7 times the block's scale)."""
    n = tensor.numel() // BLOCK * BLOCK
    return max(len(torch.unique(block)) for block in tensor[:n].reshape(-1, BLOCK))


def observed(hook, distinct):
    """hook, recording int4_blocks_distinct of every bucket it returns (DDP's averaged gradients)."""
    def wrapped(state, bucket):
        def check(fut):
            value = fut.value()
            tensor = value[0] if isinstance(value, list) else value
            distinct.append(int4_blocks_distinct(tensor))
            return tensor
        return hook(state, bucket).then(check)
    return wrapped


def int4_hook_without_error_feedback(state, bucket):
    """int4_hook without the residual: what quantization loses is lost for good."""
    work = torch_collective.allreduce_int4(bucket.buffer(), residual=None, group=state.process_group,
                                           block_size=state.block_size, average=True, min_bytes=state.min_bytes,
                                           async_op=True)
    return work.get_future().then(lambda f: f.value()[0])


def int4_training(rank, world):
    torch.set_num_threads(1)
    gloo = init()
    x, y = make_shard(rank)
    runs = {}
    for name, state, hook in (
            ("float32", None, None),
            ("int4", torch_collective.Int4State(min_bytes=MIN_BYTES), torch_collective.int4_hook),
            ("int4_default_min_bytes", torch_collective.Int4State(), torch_collective.int4_hook),
            ("int4_no_error_feedback", torch_collective.Int4State(min_bytes=MIN_BYTES),
             int4_hook_without_error_feedback)):
        model = ddp(make_model(seed=100 + rank), None, gloo)
        distinct = []
        if hook is not None:
            model.register_comm_hook(state, observed(hook, distinct))
        trainer = train(model, x, y)
        runs[name] = {"params": flat_params(model.module), "loss": full_loss(model.module, x, y, gloo),
                      "seconds": trainer.seconds, "distinct": distinct, "buckets": bucket_sizes(model),
                      "spread": replicas_spread(model.module, gloo)}
        if state is not None:
            runs[name]["residuals"] = sorted([index, r.numel(), r.abs().max().item()]
                                             for index, r in state.residuals.items())
    reference = runs["float32"]["params"]
    for run in runs.values():
        run["param_diff"] = (run.pop("params") - reference).abs().max().item()
    report(runs)
    dist.destroy_process_group()


def test_int4_hook_training():
    results = run_ranks(WORLD, "test_training", "int4_training", timeout=150)
    runs = results[0]
    f32, int4, fallback, no_ef = (runs[k] for k in ("float32", "int4", "int4_default_min_bytes",
                                                     "int4_no_error_feedback"))
    print("\nfinal loss: float32 %.5f, int4 %.5f (%+.3f%%), int4 without error feedback %.5f (%+.3f%%); max param "
          "difference from float32: int4 %.3g, without error feedback %.3g, default min_bytes %.3g; "
          "%.1f s vs %.1f s" % (
              f32["loss"], int4["loss"], 100 * (int4["loss"] / f32["loss"] - 1), no_ef["loss"],
              100 * (no_ef["loss"] / f32["loss"] - 1), int4["param_diff"], no_ef["param_diff"],
              fallback["param_diff"], int4["seconds"], f32["seconds"]))
    # The compressed training is as good as the float32 one.
    assert abs(int4["loss"] - f32["loss"]) <= 0.02 * f32["loss"], (int4["loss"], f32["loss"])
    # It really was compressed: every bucket DDP got back is 4-bit blocks (at most 15 values per
    # block of 64, where float32 gradients have 64), the parameters took another path (slightly)...
    assert int4["distinct"] and max(int4["distinct"]) <= 15, int4["distinct"]
    assert max(fallback["distinct"]) > 15, fallback["distinct"]
    assert 1e-5 < int4["param_diff"] < 0.05, int4["param_diff"]
    # ...and the error feedback worked: one residual per bucket (keyed by bucket index, the bucket's
    # size), each holding what quantization lost (non-zero); without it, the run strays further.
    numel = [size // 4 for size in int4["buckets"]]
    assert [(index, count) for index, count, _ in int4["residuals"]] == list(enumerate(numel)), (
        int4["residuals"], int4["buckets"])
    assert all(0 < largest < 0.1 for _, _, largest in int4["residuals"]), int4["residuals"]
    assert no_ef["param_diff"] > 2 * int4["param_diff"], (no_ef["param_diff"], int4["param_diff"])
    # Below min_bytes (the library's default, 64 KiB) the hook runs uncompressed: residuals untouched.
    assert fallback["residuals"] and all(largest == 0 for _, _, largest in fallback["residuals"]), \
        fallback["residuals"]
    assert fallback["param_diff"] <= 1e-5, fallback["param_diff"]
    assert abs(fallback["loss"] - f32["loss"]) <= 1e-4 * f32["loss"]
    # Every rank holds the same parameters (the compressed All-Reduce is bit-identical on all ranks).
    for rank_runs in results:
        for name, run in rank_runs.items():
            assert run["spread"] == 0.0, (name, run["spread"])
