"""The settings of accord's life beside other frameworks (today: torch).

Owns: ``TORCH_DEFAULT_GROUP`` (whether accord's world is torch's default group too) and its
reader. Must not know torch, or what reads the setting.
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


def torch_default_group() -> bool:
    """ACCORD_TORCH_DEFAULT_GROUP: whether accord's world becomes torch's default group."""
    return (TORCH_DEFAULT_GROUP.raw() or "1").lower() not in ("0", "false", "no", "off")
