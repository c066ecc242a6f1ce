"""libcollective as a torch.distributed backend.

Importing this package registers the backend "collective"::

    import torch.distributed as dist
    import torch_collective  # noqa: F401  (registers the backend)
    dist.init_process_group("collective")  # torchrun's environment, or init_method= / store=

Every group made with that backend (the default one and those of ``dist.new_group``) runs on its
own libcollective communicator, whose unique id travels through the c10d store PyTorch hands the
backend. Beyond c10d: :func:`allreduce_int4` and the DDP comm hook :func:`int4_hook` (4-bit
compressed All-Reduce with error feedback), :func:`shrink`, :func:`split`, :func:`abort` and
:func:`failed_ranks`.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist

# One lane per communicator unless the user chose otherwise: each group's worker issues one call
# at a time, so a second lane would only add a second set of connections, made on its first call
# (a slower first step, and a peer lost before that call is found by the timeout, not at once).
os.environ.setdefault("COLL_STREAM_LANES", "1")

from . import _C  # noqa: E402
from .hooks import Int4State, int4_hook

__all__ = ["allreduce_int4", "shrink", "split", "abort", "failed_ranks", "Int4State", "int4_hook",
           "BACKEND_NAME", "library_version"]

BACKEND_NAME = "collective"
SPLIT_NOCOLOR = _C.SPLIT_NOCOLOR


def _create(options, pg_options=None):
    """The backend's creator (PyTorch's extended API: the group's ranks in the default group)."""
    timeout = options.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return _C.create_process_group(options.store, options.group_rank, options.group_size, timeout,
                                   list(options.global_ranks_in_group))


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True)


_register()


def _group(group):
    if group is None:
        return dist.distributed_c10d._get_default_group()
    if group is dist.GroupMember.NON_GROUP_MEMBER:
        # What dist.new_group gives the ranks it leaves out: not a process group at all.
        raise ValueError("torch_collective: this process (global rank %d) is not a member of the given group "
                         "(dist.new_group returned GroupMember.NON_GROUP_MEMBER here)" % dist.get_rank())
    if hasattr(group, "_get_backend"):  # PyTorch 2.x: a ProcessGroup holds one backend per device type
        return group._get_backend(torch.device("cpu"))
    return group


def allreduce_int4(tensor, residual=None, group=None, block_size=64, average=False, min_bytes=0,
                   async_op=False):
    """All-Reduce of a float32/float16/bfloat16 tensor in place, sent as 4-bit integers with one
    bfloat16 scale per block of ``block_size`` elements; ``residual`` (float32, same number of
    elements, zeros at the start) carries what quantization lost into the next call (error
    feedback). Returns the Work when ``async_op``."""
    work = _C.allreduce_int4(_group(group), tensor, residual, block_size, average, min_bytes)
    if async_op:
        return work
    work.wait()
    return None


_adopted = 0


def _adopt(pg):
    """Enters a group made by shrink or split into torch.distributed's group tables (as new_group
    does), so every torch.distributed call takes it as ``group=``, those that name a rank too.
    Collective over the new group: its members exchange their global ranks."""
    global _adopted
    if pg is None:
        return None
    c10d = dist.distributed_c10d
    mine = torch.tensor([dist.get_rank()], dtype=torch.int64)
    ranks = [torch.zeros(1, dtype=torch.int64) for _ in range(pg.size())]
    pg.allgather([ranks], [mine]).wait()
    c10d._pg_group_ranks[pg] = {int(g.item()): r for r, g in enumerate(ranks)}
    c10d._pg_map[pg] = (dist.Backend(BACKEND_NAME), c10d._pg_map[c10d._get_default_group()][1])
    _adopted += 1
    c10d._pg_names[pg] = "torch_collective_%d" % _adopted
    return pg


def shrink(exclude_ranks, group=None):
    """A new process group of the ranks of ``group`` not in ``exclude_ranks`` (ranks of that group,
    e.g. from :func:`failed_ranks`), in the same order, made without the excluded ranks (they may be
    dead). Every surviving rank calls it with the same list; pass the result as ``group=``."""
    return _adopt(_C.shrink(_group(group), list(exclude_ranks)))


def split(color, key=0, group=None):
    """collCommSplit over ``group`` (every member calls it): the ranks with the same ``color`` form a
    new process group ordered by ``key`` (pass it as ``group=``); ``SPLIT_NOCOLOR`` gives None."""
    return _adopt(_C.split(_group(group), color, key))


def abort(group=None):
    """Stops the group's communicator at once, without waiting for peers: work in flight and
    queued work fails (``wait()`` raises)."""
    _C.abort(_group(group))


def failed_ranks(group=None):
    """The ranks of ``group`` this process knows to have failed."""
    return _C.failed_ranks(_group(group))


def library_version():
    """libcollective's version as major * 10000 + minor * 100 + patch."""
    return _C.library_version()
