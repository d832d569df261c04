"""PrefixStore beyond the contract: key layout, isolation, delegation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from accord.store import HashStore, PrefixStore


def test_keys_and_queues_live_under_the_prefix() -> None:
    base = HashStore()
    store = PrefixStore("job", base)
    store.set("k", "v")
    store.add("n", 1)
    store.queue_push("q", "item")
    assert base.list_keys() == ["job/k", "job/n"]
    assert base.queue_len("job/q") == 1
    assert store.underlying_store is base


def test_prefixes_are_isolated() -> None:
    base = HashStore()
    first, second = PrefixStore("a", base), PrefixStore("ab", base)
    first.set("k", "1")
    second.set("k", "2")
    base.set("unrelated", "3")
    assert first.get("k") == b"1" and second.get("k") == b"2"
    assert first.list_keys() == ["k"] and first.num_keys() == 1
    assert not first.check(["unrelated"])


def test_nested_prefixes() -> None:
    base = HashStore()
    inner = PrefixStore("inner", PrefixStore("outer", base))
    inner.set("k", "v")
    assert base.list_keys() == ["outer/inner/k"]
    assert inner.list_keys() == ["k"]


def test_timeout_is_the_underlying_stores() -> None:
    base = HashStore(timedelta(seconds=3))
    store = PrefixStore("p", base)
    assert store.timeout == timedelta(seconds=3)
    store.set_timeout(timedelta(seconds=5))
    assert base.timeout == timedelta(seconds=5)


def test_clone_wraps_a_clone_and_close_leaves_the_base_open() -> None:
    base = HashStore()
    store = PrefixStore("p", base)
    clone = store.clone()
    assert clone.underlying_store is not base
    clone.set("k", "v")
    assert base.get("p/k") == b"v"
    store.close()
    assert base.get("p/k") == b"v"


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        PrefixStore(1, HashStore())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PrefixStore("p", object())  # type: ignore[arg-type]
