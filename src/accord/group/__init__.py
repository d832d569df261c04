"""Process groups: membership, sequencing, Work/Future, and the collectives on a group."""

from .process_group import ProcessGroup
from .work import Future, Work

__all__ = ["Future", "ProcessGroup", "Work"]
