"""The settings of accord's life beside other frameworks (today: torch).

Owns: ``TORCH_DEFAULT_GROUP`` (whether accord's world is torch's default group too) and its
reader; ``TORCH_HEAP`` (whether a process raises glibc's mmap threshold for torch's tensors:
``accord.heap``). Must not know torch, or what reads the setting.
"""

from __future__ import annotations

from .setting import register

TORCH_DEFAULT_GROUP = register(
    "ACCORD_TORCH_DEFAULT_GROUP",
    "1",
    "1: in a program that has torch (imported before accord's init_process_group, or after "
    "it), accord's world is torch.distributed's default group too, on the same connections "
    "(torch's DDP, FSDP, DeviceMesh and torch.distributed.* calls find it); destroying it "
    "through either API ends both. 0: torch's default group is left alone (torch's code "
    "then needs torch.distributed.init_process_group of its own).",
)

TORCH_HEAP = register(
    "ACCORD_TORCH_HEAP",
    "1",
    "1: when its first accord world is made with torch's huge pages on (THP_MEM_ALLOC_ENABLE, "
    "which accord sets unless it is set), a process raises glibc's mmap threshold to its "
    "ceiling (~32 MiB; one block allocated and freed), so torch tensors up to that size come "
    "from the heap, not fresh pages at every allocation (a 16 MiB functional all_reduce at "
    "world 2: 5.5 ms -> 3.3 ms); glibc then keeps up to 64 MiB free for reuse. 0: leave "
    "malloc alone.",
)


def torch_default_group() -> bool:
    """ACCORD_TORCH_DEFAULT_GROUP: whether accord's world becomes torch's default group."""
    return (TORCH_DEFAULT_GROUP.raw() or "1").lower() not in ("0", "false", "no", "off")
