"""errors, timeouts and config: the foundation's contracts."""

from __future__ import annotations

from datetime import timedelta

import pytest

import accord
from accord import config, errors
from accord.timeouts import Deadline, FakeClock, format_seconds, to_seconds


@pytest.mark.parametrize("cls,builtin", [
    (errors.DistError, RuntimeError), (errors.DistTimeoutError, TimeoutError),
    (errors.PeerError, ConnectionError), (errors.DistStoreError, RuntimeError),
    (errors.StoreTimeoutError, TimeoutError), (errors.StoreTimeoutError, errors.DistStoreError),
    (errors.QueueEmptyError, errors.DistStoreError), (errors.CollectiveMismatchError, RuntimeError),
    (errors.NotInitializedError, ValueError), (errors.DistNetworkError, ConnectionError),
    (errors.ProtocolError, errors.PeerError), (errors.InternalError, errors.DistError),
])
def test_every_error_is_also_the_nearest_builtin(cls, builtin):
    assert issubclass(cls, builtin) and issubclass(cls, errors.DistError)
    assert str(cls("what happened")) == "what happened"


def test_with_context_prefixes_once_and_keeps_the_class_and_peer():
    original = errors.PeerError("rank 3 is gone", peer=3)
    wrapped = errors.with_context(original, "all_reduce #2 on rank 0")
    assert type(wrapped) is errors.PeerError and wrapped.peer == 3
    assert str(wrapped) == "all_reduce #2 on rank 0: rank 3 is gone"
    assert wrapped.__cause__ is original
    assert errors.with_context(wrapped, "all_reduce #2 on rank 0") is wrapped


def test_deadline_on_a_fake_clock():
    clock = FakeClock()
    deadline = Deadline.after(timedelta(seconds=30), clock)
    assert deadline.remaining() == 30 and not deadline.expired()
    clock.advance(29.5)
    assert deadline.remaining() == pytest.approx(0.5)
    clock.advance(1)
    assert deadline.remaining() == 0 and deadline.expired()
    with pytest.raises(errors.DistTimeoutError, match="30 s waiting for rank 3"):
        deadline.raise_if_expired("rank 3")


def test_deadline_earlier():
    clock = FakeClock()
    a, b = Deadline.after(1.0, clock), Deadline.after(2.0, clock)
    assert a.earlier(b) is a and b.earlier(a) is a and a.earlier(None) is a


@pytest.mark.parametrize("value,seconds", [(timedelta(minutes=2), 120.0), (1.5, 1.5), (3, 3.0)])
def test_to_seconds(value, seconds):
    assert to_seconds(value) == seconds


def test_to_seconds_rejects_bad_values():
    with pytest.raises(ValueError, match=">= 0"):
        to_seconds(-1)
    with pytest.raises(TypeError):
        to_seconds("10")
    with pytest.raises(TypeError):
        to_seconds(True)
    assert to_seconds(None, default=timedelta(seconds=4)) == 4


@pytest.mark.parametrize("seconds,text", [(1800, "30 min"), (30, "30 s"), (1.5, "1.5 s"), (0.25, "250 ms")])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_config_reads_at_call_time_and_names_bad_values(monkeypatch):
    monkeypatch.setenv("ACCORD_SEGMENT_BYTES", "4096")
    assert config.segment_bytes() == 4096
    monkeypatch.setenv("ACCORD_SEGMENT_BYTES", "lots")
    with pytest.raises(ValueError, match="ACCORD_SEGMENT_BYTES"):
        config.segment_bytes()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK='x'"):
        config.env_int(config.RANK)


def test_gloo_socket_ifname_is_honoured_as_an_alias(monkeypatch):
    monkeypatch.delenv("ACCORD_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    assert config.socket_ifname() == "eth7"
    monkeypatch.setenv("ACCORD_SOCKET_IFNAME", "lo")
    assert config.socket_ifname() == "lo"


def test_algorithm_overrides_parse_and_reject(monkeypatch):
    monkeypatch.setenv("ACCORD_ALGORITHM", "all_reduce=ring, broadcast=pipeline")
    assert config.algorithm_overrides() == {"all_reduce": "ring", "broadcast": "pipeline"}
    monkeypatch.setenv("ACCORD_ALGORITHM", "ring")
    with pytest.raises(ValueError, match="collective=algorithm"):
        config.algorithm_overrides()


def test_unknown_forced_algorithm_lists_the_known_ones():
    from accord.collectives.registry import choose

    tunables = config.Tunables(1 << 20, 1 << 16, {"all_reduce": "bogus"})
    with pytest.raises(ValueError, match="recursive_doubling.*ring"):
        choose("all_reduce", 8, 2, tunables)


@pytest.mark.parametrize("cpus, size, nbytes, expected", [
    # ranks sharing cores (4 on 2): the syncs dominate, single-copy from 64 KiB (unchanged)
    (2, 4, 64 << 10, "cma_two_shot"), (2, 4, 32 << 10, "shm_one_shot"), (2, 4, 8 << 10, "shm_reduce_bcast"),
    # a core per rank: the slots' two-shot until single-copy overtakes it, later in larger groups
    (16, 2, 32 << 10, "shm_one_shot"), (16, 2, 256 << 10, "shm_two_shot"), (16, 2, 4 << 20, "cma_two_shot"),
    (16, 4, 64 << 10, "shm_two_shot"), (16, 4, 4 << 20, "shm_two_shot"), (16, 4, 16 << 20, "cma_two_shot"),
    (16, 8, 8 << 10, "shm_reduce_bcast"), (16, 8, 64 << 10, "shm_two_shot"), (16, 8, 16 << 20, "shm_two_shot"),
    (0, 2, 256 << 10, "cma_two_shot"),  # cores unknown: as when they are shared
])
def test_all_reduce_on_one_host_follows_the_cores(cpus: int, size: int, nbytes: int, expected: str) -> None:
    from accord.collectives.registry import choose

    tunables = config.Tunables(1 << 20, 1 << 16, {}, host_cpus=cpus)
    assert choose("all_reduce", nbytes, size, tunables, shared=True, cma=True).name == expected


@pytest.mark.parametrize("collective, cpus, size, nbytes, expected", [
    ("broadcast", 2, 4, 256 << 10, "cma"), ("broadcast", 16, 4, 4 << 20, "shm"),
    ("broadcast", 16, 4, 16 << 20, "cma"), ("broadcast", 16, 2, 128 << 10, "shm"),
    ("broadcast", 16, 2, 256 << 10, "cma"), ("all_gather", 16, 8, 16 << 20, "shm"),
    ("all_gather", 16, 2, 1 << 20, "cma"), ("reduce_scatter", 16, 8, 1 << 20, "shm"),
    ("reduce_scatter", 16, 8, 4 << 20, "cma"), ("reduce_scatter", 16, 4, 1 << 20, "cma"),
    ("reduce_scatter", 2, 4, 64 << 10, "cma"), ("all_to_all", 16, 4, 1 << 20, "cma"),
])
def test_single_copy_waits_for_larger_messages_with_a_core_per_rank(
    collective: str, cpus: int, size: int, nbytes: int, expected: str
) -> None:
    from accord.collectives.registry import choose

    tunables = config.Tunables(1 << 20, 1 << 16, {}, host_cpus=cpus)
    assert choose(collective, nbytes, size, tunables, shared=True, cma=True).name == expected


def test_describe_prints_every_setting():
    lines: list[str] = []
    config.describe(lines.append)
    assert any(line.startswith("ACCORD_SOCKET_IFNAME (also GLOO_SOCKET_IFNAME)") for line in lines)
    assert accord.is_available()
