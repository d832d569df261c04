"""One contract, every store: the semantics in ``accord.store.base``'s docstring.

The ``store`` fixture (conftest.py) runs each test on HashStore, FileStore, PrefixStore over
HashStore and over TCPStore, a TCPStore master, and a TCPStore client of a master.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from accord.errors import DistStoreError, QueueEmptyError, StoreTimeoutError
from accord.store import Store, TCPStore


def _in_thread(store: Store, method: str, *args):
    """Call ``method`` on a clone of ``store`` in another thread; returns a join-and-get."""
    clone = store.clone()
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = getattr(clone, method)(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = exc
        finally:
            clone.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result():
        thread.join(10)
        assert not thread.is_alive(), f"{method} never returned"
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    return result


# -- set / get ---------------------------------------------------------------------------------
def test_set_get_str_and_bytes(store: Store) -> None:
    store.set("text", "héllo")
    store.set("raw", b"\x00\xff\x01")
    store.set("empty", b"")
    assert store.get("text") == "héllo".encode()
    assert store.get("raw") == b"\x00\xff\x01"
    assert store.get("empty") == b""
    assert isinstance(store.get("text"), bytes)


def test_set_overwrites(store: Store) -> None:
    store.set("k", "one")
    store.set("k", "two")
    assert store.get("k") == b"two"


def test_bytes_like_values(store: Store) -> None:
    store.set("ba", bytearray(b"ab"))
    store.set("mv", memoryview(b"cd"))
    assert store.get("ba") == b"ab" and store.get("mv") == b"cd"


def test_bad_key_and_value_types_raise_type_error(store: Store) -> None:
    with pytest.raises(TypeError):
        store.set(1, "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.set("k", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.wait("single-string")  # type: ignore[arg-type]


def test_get_times_out_naming_the_key(store: Store, short_timeout: timedelta) -> None:
    with pytest.raises(StoreTimeoutError, match="never-set") as info:
        store.get("never-set")
    assert isinstance(info.value, DistStoreError)
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value, TimeoutError)


def test_get_waits_for_another_threads_set(store: Store) -> None:
    result = _in_thread(store, "get", "late")
    store.set("late", "here")
    assert result() == b"here"


# -- add ---------------------------------------------------------------------------------------
def test_add_counts_from_zero(store: Store) -> None:
    assert store.add("n", 5) == 5
    assert store.add("n", -2) == 3
    assert store.add("n", 0) == 3
    assert store.get("n") == b"3"


def test_add_on_a_set_integer(store: Store) -> None:
    store.set("n", "41")
    assert store.add("n", 1) == 42


def test_add_on_a_non_integer_raises(store: Store) -> None:
    store.set("word", "hello")
    with pytest.raises(DistStoreError, match="word"):
        store.add("word", 1)
    assert store.get("word") == b"hello"


def test_concurrent_adds_are_exact(store: Store) -> None:
    handles = [store.clone() for _ in range(4)]

    def bump(handle: Store) -> None:
        for _ in range(25):
            handle.add("total", 1)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(bump, handles))
    assert store.add("total", 0) == 100
    for handle in handles:
        handle.close()


# -- compare_set -------------------------------------------------------------------------------
def test_compare_set_missing_key_with_empty_expected_sets(store: Store) -> None:
    assert store.compare_set("cs", "", "first") == b"first"
    assert store.get("cs") == b"first"


def test_compare_set_missing_key_with_other_expected_returns_expected(store: Store) -> None:
    assert store.compare_set("cs", "guess", "new") == b"guess"
    assert not store.check(["cs"])


def test_compare_set_match_sets(store: Store) -> None:
    store.set("cs", "old")
    assert store.compare_set("cs", "old", "new") == b"new"
    assert store.get("cs") == b"new"


def test_compare_set_mismatch_returns_current(store: Store) -> None:
    store.set("cs", "old")
    assert store.compare_set("cs", "other", "new") == b"old"
    assert store.get("cs") == b"old"


# -- wait / check ------------------------------------------------------------------------------
def test_wait_returns_when_keys_exist(store: Store) -> None:
    store.multi_set(["a", "b"], ["1", "2"])
    store.wait(["a", "b"])
    store.wait([])


def test_wait_times_out_naming_only_missing_keys(store: Store) -> None:
    store.set("present", "1")
    with pytest.raises(StoreTimeoutError) as info:
        store.wait(["present", "absent"], timedelta(milliseconds=30))
    assert "absent" in str(info.value)
    assert "present" not in str(info.value).split("waiting for", 1)[1]


def test_wait_zero_timeout_checks_once(store: Store) -> None:
    store.set("here", "1")
    store.wait(["here"], timedelta(0))
    with pytest.raises(StoreTimeoutError, match="gone"):
        store.wait(["gone"], timedelta(0))


def test_wait_released_by_another_threads_set(store: Store) -> None:
    result = _in_thread(store, "wait", ["x", "y"])
    store.set("x", "1")
    store.set("y", "2")
    assert result() is None


def test_check(store: Store) -> None:
    assert store.check([])
    assert not store.check(["c"])
    store.set("c", "1")
    assert store.check(["c"])
    assert not store.check(["c", "d"])


# -- delete / num_keys / list_keys -------------------------------------------------------------
def test_delete_key(store: Store) -> None:
    store.set("d", "1")
    assert store.delete_key("d") is True
    assert store.delete_key("d") is False
    assert not store.check(["d"])


def test_num_keys_and_list_keys_count_only_user_keys(store: Store) -> None:
    assert store.num_keys() == 0
    assert store.list_keys() == []
    store.set("b", "1")
    store.add("a", 1)
    store.append("c", "x")
    store.queue_push("queue", "not a key")
    assert store.num_keys() == 3
    assert store.list_keys() == ["a", "b", "c"]
    store.delete_key("b")
    assert store.num_keys() == 2


# -- append / multi ----------------------------------------------------------------------------
def test_append(store: Store) -> None:
    store.append("log", "ab")
    store.append("log", b"cd")
    assert store.get("log") == b"abcd"


def test_multi_set_and_multi_get(store: Store) -> None:
    store.multi_set(["m1", "m2", "m3"], ["a", b"b", ""])
    assert store.multi_get(["m3", "m1", "m2"]) == [b"", b"a", b"b"]
    assert store.multi_get([]) == []


def test_multi_set_length_mismatch(store: Store) -> None:
    with pytest.raises(ValueError):
        store.multi_set(["a", "b"], ["1"])


def test_multi_get_times_out_naming_missing(store: Store, short_timeout: timedelta) -> None:
    store.set("have", "1")
    with pytest.raises(StoreTimeoutError, match="lack"):
        store.multi_get(["have", "lack"])


def test_multi_get_released_by_another_thread(store: Store) -> None:
    result = _in_thread(store, "multi_get", ["p", "q"])
    store.multi_set(["q", "p"], ["Q", "P"])
    assert result() == [b"P", b"Q"]


# -- queues ------------------------------------------------------------------------------------
def test_queue_fifo_and_len(store: Store) -> None:
    assert store.queue_len("q") == 0
    for item in ("1", b"2", "3"):
        store.queue_push("q", item)
    assert store.queue_len("q") == 3
    assert [store.queue_pop("q") for _ in range(3)] == [b"1", b"2", b"3"]
    assert store.queue_len("q") == 0


def _tcp(store: Store) -> bool:
    return isinstance(getattr(store, "underlying_store", store), TCPStore)


def test_queues_are_not_keys(store: Store) -> None:
    store.queue_push("q", "v")
    # torch's server (and so accord's TCPStore) counts a non-empty queue as present for
    # check and wait: that is how a blocking queue_pop waits. Other stores see keys only.
    assert store.check(["q"]) == _tcp(store)
    assert store.num_keys() == 0
    store.set("q", "key value")
    assert store.queue_pop("q") == b"v"
    assert store.get("q") == b"key value"


def test_queue_pop_nonblocking_on_empty_raises(store: Store) -> None:
    with pytest.raises(QueueEmptyError, match="empty") as info:
        store.queue_pop("nothing", block=False)
    assert isinstance(info.value, DistStoreError)
    store.queue_push("something", "v")
    assert store.queue_pop("something", block=False) == b"v"


def test_queue_pop_blocking_times_out(store: Store, short_timeout: timedelta) -> None:
    with pytest.raises(StoreTimeoutError, match="idle"):
        store.queue_pop("idle")


def test_queue_pop_released_by_another_threads_push(store: Store) -> None:
    result = _in_thread(store, "queue_pop", "work")
    store.queue_push("work", "job")
    assert result() == b"job"
    assert store.queue_len("work") == 0


def test_each_pushed_value_is_popped_once(store: Store) -> None:
    handles = [store.clone() for _ in range(3)]
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(h.queue_pop, "jobs") for h in handles for _ in range(2)]
        for i in range(6):
            store.queue_push("jobs", str(i))
        popped = sorted(f.result(timeout=10) for f in futures)
    assert popped == [str(i).encode() for i in range(6)]
    for handle in handles:
        handle.close()


# -- handles, timeouts, barrier ----------------------------------------------------------------
def test_clone_shares_data(store: Store) -> None:
    clone = store.clone()
    clone.set("from-clone", "1")
    assert store.get("from-clone") == b"1"
    store.set("from-original", "2")
    assert clone.get("from-original") == b"2"
    assert clone.timeout == store.timeout
    clone.close()
    assert store.get("from-clone") == b"1"


def test_timeout_and_set_timeout(store: Store) -> None:
    assert isinstance(store.timeout, timedelta)
    store.set_timeout(timedelta(seconds=7))
    assert store.timeout == timedelta(seconds=7)


def test_barrier(store: Store) -> None:
    handles = [store.clone() for _ in range(3)]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda h: h.barrier("b1", 3), handles))
    for handle in handles:
        handle.close()


def test_barrier_times_out_when_someone_is_missing(store: Store) -> None:
    with pytest.raises(StoreTimeoutError):
        store.barrier("b2", 2, timedelta(milliseconds=30))


def test_has_extended_api(store: Store) -> None:
    assert store.has_extended_api() is True


def test_concurrent_waiters_all_released(store: Store) -> None:
    handles = [store.clone() for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(h.get, "go") for h in handles]
        store.set("go", "now")
        assert [f.result(timeout=10) for f in futures] == [b"now"] * 4
    for handle in handles:
        handle.close()
