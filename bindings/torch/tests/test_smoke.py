"""The package imports, registers the backend, and a 2-rank All-Reduce matches gloo's."""
import torch
import torch.distributed as dist

from harness import init, report, run_ranks


def allreduce_matches_gloo(rank, world):
    gloo = init()
    t = torch.arange(10, dtype=torch.float32) * (rank + 1)
    ref = t.clone()
    dist.all_reduce(t)
    dist.all_reduce(ref, group=gloo)
    assert torch.equal(t, ref), (t, ref)
    report({"backend": dist.get_backend(), "sum": t.tolist()})
    dist.destroy_process_group()


def test_import_registers_backend():
    import torch_collective
    assert dist.Backend.COLLECTIVE == "COLLECTIVE" or hasattr(dist.Backend, "COLLECTIVE")
    assert torch_collective.library_version() >= 100


def test_allreduce_two_ranks_matches_gloo():
    results = run_ranks(2, "test_smoke", "allreduce_matches_gloo")
    assert results[0]["sum"] == results[1]["sum"]
    assert results[0]["sum"][1] == 3.0
