"""DDP communication hook: the 4-bit compressed All-Reduce with error feedback.

    state = torch_collective.Int4State()
    model.register_comm_hook(state, torch_collective.int4_hook)
"""
import torch
import torch.distributed as dist

from . import _C


class Int4State:
    """What the hook keeps between steps: the group, the compression settings and, per gradient
    bucket, the residual (what quantization has not yet delivered, added to the next step)."""

    def __init__(self, process_group=None, block_size=64, min_bytes=0):
        self.process_group = process_group
        self.block_size = block_size
        self.min_bytes = min_bytes
        self.residuals = {}

    def residual(self, bucket_index, tensor):
        r = self.residuals.get(bucket_index)
        if r is None or r.numel() != tensor.numel():
            r = torch.zeros(tensor.numel(), dtype=torch.float32)
            self.residuals[bucket_index] = r
        return r


def int4_hook(state, bucket):
    """Averages the bucket's gradients across the group with 4-bit compression (float32, float16 or
    bfloat16 buckets; others go uncompressed). Returns the future DDP waits on."""
    group = state.process_group or dist.distributed_c10d._get_default_group()
    tensor = bucket.buffer()
    if tensor.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        tensor.div_(group.size())
        return dist.all_reduce(tensor, group=group, async_op=True).get_future().then(lambda f: f.value()[0])
    residual = state.residual(bucket.index(), tensor)
    work = _C.allreduce_int4(group, tensor, residual, state.block_size, True, state.min_bytes)
    return work.get_future().then(lambda f: f.value()[0])
