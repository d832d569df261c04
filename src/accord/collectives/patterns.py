"""Topology arithmetic shared by the algorithms: chunks, segments, virtual ranks, trees.

Owns: pure functions of (rank, size, count). Must not know about messages or buffers.
"""

from __future__ import annotations


def chunk_bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """Split ``count`` elements into ``parts`` contiguous (start, stop) ranges, the first
    ``count % parts`` one element longer (as numpy.array_split)."""
    base, extra = divmod(count, parts)
    bounds = []
    start = 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def segments(start: int, stop: int, segment: int) -> list[tuple[int, int]]:
    """Split [start, stop) into pieces of at most ``segment`` elements (at least one piece)."""
    if stop - start <= segment:
        return [(start, stop)]
    return [(s, min(s + segment, stop)) for s in range(start, stop, segment)]


def virtual_rank(rank: int, root: int, size: int) -> int:
    """Rank renumbered so that ``root`` is 0."""
    return (rank - root) % size


def real_rank(vrank: int, root: int, size: int) -> int:
    return (vrank + root) % size


def binomial_parent(vrank: int) -> int | None:
    """The virtual rank this one receives from in a binomial tree rooted at 0."""
    if vrank == 0:
        return None
    return vrank & (vrank - 1)  # clear the lowest set bit


def binomial_children(vrank: int, size: int) -> list[int]:
    """The virtual ranks this one sends to, largest subtree first."""
    children = []
    mask = 1
    while mask < size and not vrank & mask:
        mask <<= 1
    # mask is now the lowest set bit of vrank (or >= size for the root)
    mask >>= 1
    while mask > 0:
        if vrank + mask < size:
            children.append(vrank + mask)
        mask >>= 1
    return children


def largest_power_of_two(n: int) -> int:
    """The largest power of two <= n (n >= 1)."""
    return 1 << (n.bit_length() - 1)


def binomial_extent(vrank: int, size: int) -> int:
    """How many virtual ranks the binomial subtree of ``vrank`` covers, itself included
    (the subtree is the contiguous range vrank … vrank + extent - 1)."""
    if vrank == 0:
        return size
    return min(vrank & -vrank, size - vrank)
