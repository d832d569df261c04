"""Fixtures for the store tests: every Store implementation behind one ``store`` fixture."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterator

import pytest

from accord.store import FileStore, HashStore, PrefixStore, Store, TCPStore

#: Long enough never to fire in a passing test; timeout tests shorten it themselves.
TEST_TIMEOUT = timedelta(seconds=10)


def _tcp_master(stack: ExitStack) -> TCPStore:
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TEST_TIMEOUT)
    stack.callback(master.close)
    return master


def _tcp_client(stack: ExitStack) -> TCPStore:
    master = _tcp_master(stack)
    client = TCPStore("127.0.0.1", master.port, timeout=TEST_TIMEOUT)
    stack.callback(client.close)
    return client


def _file(stack: ExitStack, tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "store", timeout=TEST_TIMEOUT)
    stack.callback(store.close)
    return store


MAKERS: dict[str, Callable[[ExitStack, Path], Store]] = {
    "hash": lambda stack, tmp: HashStore(TEST_TIMEOUT),
    "file": _file,
    "prefix-hash": lambda stack, tmp: PrefixStore("job/7", HashStore(TEST_TIMEOUT)),
    "prefix-tcp": lambda stack, tmp: PrefixStore("pg", _tcp_master(stack)),
    "tcp-master": lambda stack, tmp: _tcp_master(stack),
    "tcp-client": lambda stack, tmp: _tcp_client(stack),
}


@pytest.fixture(params=sorted(MAKERS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with ExitStack() as stack:
        yield MAKERS[request.param](stack, tmp_path)


@pytest.fixture
def short_timeout(store: Store) -> timedelta:
    """Shorten the store's timeout for a test that expects a timeout."""
    timeout = timedelta(milliseconds=50)
    store.set_timeout(timeout)
    return timeout
