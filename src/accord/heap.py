"""glibc's mmap threshold, raised once per process so that torch's large huge-page tensors
come from the heap instead of fresh pages on every allocation.

Owns: ``raise_mmap_threshold()``, called where accord asks torch for huge pages
(``api.worlds.build_world``, right after ``config.prefer_huge_pages``), and only while they
are on (``THP_MEM_ALLOC_ENABLE``); ``ACCORD_TORCH_HEAP=0`` turns it off. Must not know
about torch or collectives.

Why. glibc serves a large ``malloc`` with a fresh ``mmap`` (and gives it back with ``munmap``
when freed) while the size is above its mmap threshold, which starts at 128 KiB and rises to
the size of any mmapped block freed (up to 32 MiB). With transparent huge pages on
(``THP_MEM_ALLOC_ENABLE=1``, which accord's ``init_process_group`` sets unless it is set:
the single-copy path moves huge-page tensors twice as fast), torch allocates a large CPU
tensor with ``posix_memalign`` at page alignment, whose request is a page and 32 bytes
larger than the block it gets; freeing that block raises the threshold to the block's size,
16 bytes short of the next request of the same size. So a program that allocates a tensor
of one large size again and again (a functional collective's output, a step's activations)
got fresh pages every time: a 16 MiB ``torch.ops._c10d_functional.all_reduce`` took 5.3–5.8
ms at world 2, 520 page faults a call, against 3.2–3.5 ms once the threshold was up (the
output's copy 1.3–1.4 ms, the all_reduce 1.7–1.9).

The fix is what glibc itself does after any large free, done once at the start: allocate and
free one block just under glibc's 32 MiB ceiling (NumPy's ``empty``: ``malloc``, no page
touched). Sizes up to ~32 MiB then come from the heap, and glibc keeps up to twice that free
at its top instead of returning it (its own trim threshold) — memory a program that
allocates such tensors reuses at once.
"""

from __future__ import annotations

import platform
import threading

import numpy as np

from .config import TORCH_HUGE_PAGES
from .config.integrations import TORCH_HEAP
from .config.setting import is_on

#: The block freed: glibc's ceiling for its dynamic threshold is 32 MiB (64-bit), and a block
#: larger than that would not move it; this one, with its header, stays under it.
BLOCK_BYTES = (32 << 20) - (64 << 10)

_done = False
_lock = threading.Lock()


def raise_mmap_threshold() -> bool:
    """Raise glibc's mmap threshold, once per process; whether it was done now (False: done
    before, turned off, huge pages off, or not glibc)."""
    global _done
    huge = (TORCH_HUGE_PAGES.raw() or "0").lower() not in ("0", "false", "no", "off")
    if not huge or not is_on(TORCH_HEAP) or platform.libc_ver()[0] != "glibc":
        return False
    with _lock:
        if _done:
            return False
        _done = True
    try:
        block = np.empty(BLOCK_BYTES, np.uint8)  # (malloc: mmapped, no page touched)
    except MemoryError:  # (address space capped, ``ulimit -v``): malloc as it was
        return False
    del block  # (free: munmap, and the threshold rises to its size)
    return True
