"""torch.distributed: backend "collective" against gloo in one job (run it under torchrun;
bench/compare_torch.sh does). Both backends serve the same processes: the default group is
"collective", a gloo group of the same ranks is made beside it, and the two alternate ROUNDS
times with the same loop and settings. Rank 0 prints medians and ratios, and one JSON line.

Measured:
  allreduce  dist.all_reduce of float32 tensors (16 MiB and 64 MiB), timed from Python: a barrier,
             then ITERS calls after WARMUP; the slowest rank's mean per call.
  ddp        DistributedDataParallel steps (forward, backward with DDP's bucketed All-Reduce,
             zero_grad) of an MLP with ~25M parameters; communication time per step is the
             median step time minus the median step time of the same model under no_sync()
             (the same compute, no All-Reduce), measured in the same round; the job's
             first two steps per backend are reported beside it (cold calls count).
"""
import argparse
import datetime
import json
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_collective  # noqa: F401  registers the backend


def slowest(seconds, gloo):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def time_allreduce(group, gloo, nbytes, iters, warmup):
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(x, group=group)
    dist.barrier(group=gloo)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x, group=group)
    return slowest((time.perf_counter() - start) / iters, gloo)


def make_model(hidden, layers, seed):
    torch.manual_seed(seed)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def time_ddp(ddp, data, steps, warmup, gloo, sync, first=None):
    """Median step time after warmup steps; the first steps' times go to first (a list) if given."""
    times = []
    for i in range(warmup + steps):
        dist.barrier(group=gloo)
        start = time.perf_counter()
        if sync:
            ddp(data).sum().backward()
        else:
            with ddp.no_sync():
                ddp(data).sum().backward()
        ddp.zero_grad(set_to_none=False)
        elapsed = slowest(time.perf_counter() - start, gloo)
        if first is not None and len(first) < 2:
            first.append(elapsed)
        if i >= warmup:
            times.append(elapsed)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--sizes", default="16777216,67108864")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--parts", default="allreduce,ddp")
    a = p.parse_args()
    dist.init_process_group("collective", timeout=datetime.timedelta(seconds=600))
    gloo = dist.new_group(backend="gloo")
    groups = {"collective": None, "gloo": gloo}
    rank, world = dist.get_rank(), dist.get_world_size()
    parts = a.parts.split(",")
    result = {"world": world, "rounds": a.rounds, "mpi": "not available in this PyTorch"
              if not dist.is_mpi_available() else "available, not run (needs mpirun)"}
    lines = []

    if "allreduce" in parts:
        sizes = [int(s) for s in a.sizes.split(",")]
        per = {(b, s): [] for b in groups for s in sizes}
        for _ in range(a.rounds):
            for s in sizes:
                for b, g in groups.items():
                    per[(b, s)].append(time_allreduce(g, gloo, s, a.iters, a.warmup))
        lines.append("all_reduce float32 from Python, %d ranks, -n %d -w %d, medians of %d alternated rounds"
                     % (world, a.iters, a.warmup, a.rounds))
        lines.append("%12s %14s %14s %10s" % ("bytes", "collective ms", "gloo ms", "gloo/ours"))
        result["allreduce"] = []
        for s in sizes:
            ours, theirs = statistics.median(per[("collective", s)]), statistics.median(per[("gloo", s)])
            lines.append("%12d %14.2f %14.2f %10.2f" % (s, ours * 1e3, theirs * 1e3, theirs / ours))
            result["allreduce"].append({"bytes": s, "collective_s": ours, "gloo_s": theirs,
                                        "all_collective_s": per[("collective", s)], "all_gloo_s": per[("gloo", s)]})

    if "ddp" in parts:
        torch.manual_seed(1000 + rank)
        data = torch.randn(a.batch, a.hidden)
        models = {b: DDP(make_model(a.hidden, a.layers, 0), process_group=g) for b, g in groups.items()}
        params = sum(t.numel() for t in models["gloo"].parameters())
        step = {b: [] for b in groups}
        compute = {b: [] for b in groups}
        cold = {b: [] for b in groups}  # steps 1 and 2 of the job (cold calls count)
        for _ in range(a.rounds):
            for b, m in models.items():
                step[b].append(time_ddp(m, data, a.steps, a.warmup, gloo, True, cold[b]))
                compute[b].append(time_ddp(m, data, a.steps, 1, gloo, False))
        lines.append("")
        lines.append("DDP, MLP %d x Linear(%d, %d): %.1fM parameters, batch %d, %d ranks; medians of %d rounds"
                     % (a.layers, a.hidden, a.hidden, params / 1e6, a.batch, world, a.rounds))
        lines.append("%12s %12s %12s %12s %12s %12s" % ("backend", "step ms", "compute ms", "comm ms", "step 1 ms",
                                                      "step 2 ms"))
        result["ddp"] = {"parameters": params}
        comm = {}
        for b in groups:
            s, c = statistics.median(step[b]), statistics.median(compute[b])
            comm[b] = s - c
            lines.append("%12s %12.1f %12.1f %12.1f %12.1f %12.1f" % (b, s * 1e3, c * 1e3, comm[b] * 1e3,
                                                                cold[b][0] * 1e3, cold[b][1] * 1e3))
            result["ddp"][b] = {"step_s": s, "compute_s": c, "comm_s": s - c, "all_step_s": step[b],
                                "all_compute_s": compute[b], "first_steps_s": cold[b]}
        ratio = comm["gloo"] / comm["collective"] if comm["collective"] > 0 else float("nan")
        lines.append("communication per step, gloo/collective: %.2fx" % ratio)
        result["ddp"]["comm_ratio_gloo_over_collective"] = ratio

    if rank == 0:
        print("\n".join(lines))
        print("mpi backend: " + result["mpi"])
        print("JSON " + json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
