"""``transport.cma``: single-copy reads and writes of a process's memory (this process's own
here: the kernel checks the same permission for a peer's)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from accord.errors import PeerError
from accord.transport.cma import CrossMemory, address_of, probe

pytestmark = pytest.mark.skipif(not CrossMemory.available(), reason="no process_vm_readv/writev here")


def test_read_and_write_copy_at_an_offset() -> None:
    memory, pid = CrossMemory(), os.getpid()
    there = np.arange(1000, dtype=np.int64)
    got = np.zeros(10, dtype=np.int64)
    memory.read(pid, address_of(there) + 8 * 100, got)
    assert got.tolist() == list(range(100, 110))
    memory.write(pid, address_of(there) + 8 * 500, np.full(3, -1, dtype=np.int64))
    assert there[499:504].tolist() == [499, -1, -1, -1, 503]


def test_probe_reads_and_writes_back_what_it_expects() -> None:
    word = np.array([0x1234], dtype=np.int64)
    assert probe(os.getpid(), address_of(word), word.tobytes())
    assert word[0] == 0x1234  # written back unchanged
    assert not probe(os.getpid(), address_of(word), np.array([7], dtype=np.int64).tobytes())


def test_a_process_that_is_gone_is_named() -> None:
    with pytest.raises(PeerError, match="writing process .* ESRCH"):
        CrossMemory().write(2**22 + 12345, 4096, np.zeros(1))
