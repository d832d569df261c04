"""accord.spawn, as torch.multiprocessing.spawn: results, errors carried to the parent, join=False."""

from __future__ import annotations

import time

import pytest

import accord

from . import spawn_targets
from .running import alive

pytestmark = pytest.mark.multiprocess


def test_spawn_runs_fn_with_the_index_and_args(tmp_path):
    assert accord.spawn(spawn_targets.record, args=(str(tmp_path),), nprocs=3) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.txt", "1.txt", "2.txt"]
    assert (tmp_path / "2.txt").read_text().startswith("2 ")


def test_an_exception_in_a_child_is_raised_in_the_parent_and_the_others_stop():
    start = time.monotonic()
    with pytest.raises(accord.ProcessRaisedException) as caught:
        accord.spawn(spawn_targets.raise_in_one, args=(1,), nprocs=3)
    error = caught.value
    assert isinstance(error, accord.ProcessException)
    assert error.error_index == 1 and error.pid == error.error_pid > 0
    text = str(error)
    assert "-- Process 1 terminated with the following error:" in text
    assert "Traceback (most recent call last):" in text and "spawn_targets.py" in text
    assert "ValueError: child 1 failed on purpose" in text
    assert time.monotonic() - start < 30  # the sleeping siblings were terminated, not awaited


@pytest.mark.parametrize("how, code, name", [("signal", -9, "SIGKILL"), ("exit", 7, None)])
def test_a_child_that_dies_is_reported_with_its_exit_code_or_signal(how, code, name):
    with pytest.raises(accord.ProcessExitedException) as caught:
        accord.spawn(spawn_targets.die_in_one, args=(0, how), nprocs=2)
    error = caught.value
    assert error.error_index == 0 and error.exit_code == code and error.signal_name == name
    expected = f"signal {name}" if name else f"exit code {code}"
    assert str(error) == f"process 0 terminated with {expected}"


def test_join_false_returns_a_context_to_join():
    context = accord.spawn(spawn_targets.sleep_briefly, args=(0.5,), nprocs=2, join=False)
    assert len(context.processes) == 2 and len(context.pids()) == 2
    assert context.join(timeout=0.01) is False  # still running
    deadline = time.monotonic() + 60
    while not context.join(timeout=1):
        assert time.monotonic() < deadline
    assert not any(alive(pid) for pid in context.pids())


def test_join_false_context_raises_on_failure():
    context = accord.spawn(spawn_targets.raise_in_one, args=(0,), nprocs=2, join=False)
    with pytest.raises(accord.ProcessRaisedException, match="child 0 failed on purpose"):
        while not context.join(timeout=30, grace_period=1):
            pass
