"""accord.profiling: events in torch's profiler (names, input shapes and dtypes as gloo
records them, NumPy stand-ins, events ended by another thread) and the check that costs nothing when torch
is not recording. Real collectives under the profiler are checked against gloo's events in
tests/differential/test_docs_examples.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from accord import profiling

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def accord_events(prof) -> list[tuple[str, list, list]]:
    return [(e.name, [list(s) for s in e.input_shapes], list(e.input_dtypes))
            for e in prof.events() if e.name.startswith("accord:")]


def test_not_recording_outside_the_profiler():
    assert not profiling.recording()
    assert profiling.begin_if_recording("all_reduce", (torch.ones(2),)) is None


def test_events_carry_names_shapes_and_dtypes():
    tensor = torch.ones(20, 10)
    with torch.profiler.profile(record_shapes=True) as prof:
        assert profiling.recording()
        handle = profiling.begin_if_recording("all_reduce", (tensor,))
        profiling.end(handle)
        profiling.end(profiling.begin("all_to_all", ([torch.zeros(2, dtype=torch.int32)] * 3,)))
        profiling.end(profiling.begin("recv_any", (np.zeros((4, 5), dtype=np.float64),)))
        profiling.end(profiling.begin("barrier"))
    assert accord_events(prof) == [
        ("accord:all_reduce", [[20, 10]], ["float"]),
        ("accord:all_to_all", [[2], [2], [2]], ["int", "int", "int"]),
        ("accord:recvAnySource", [[4, 5]], ["double"]),  # torch's name for it
        ("accord:barrier", [], []),
    ]


def test_numpy_stand_ins_are_cached_and_own_one_element():
    first = profiling._stand_in(torch, "float32", (1000, 1000))
    assert first.shape == (1000, 1000) and first.dtype == torch.float32
    assert first.untyped_storage().nbytes() == 4  # nothing the size of the array
    assert profiling._stand_in(torch, "float32", (1000, 1000)) is first
    assert profiling._stand_in(torch, "not_a_dtype", (2,)) is None


def _durations_ms(prof, name: str) -> list[float]:
    return [(e.time_range.end - e.time_range.start) / 1e3 for e in prof.events() if e.name == name]


def test_an_event_ended_by_another_thread_is_closed_by_its_opener():
    """torch ends an event only in the thread that opened it (else at the profiler's stop):
    ``end`` from another thread hands it back, and the opener closes it at its next flush."""
    with torch.profiler.profile(record_shapes=True) as prof:
        handle = profiling.begin("all_reduce", (torch.ones(3),))
        worker = threading.Thread(target=profiling.end, args=(handle,))
        worker.start()
        worker.join()
        time.sleep(0.005)
        profiling.flush()  # (a Work's wait, or the next begin, does this)
        time.sleep(0.05)  # the profile runs on: the event must not reach its end
    assert accord_events(prof) == [("accord:all_reduce", [[3]], ["float"])]
    (ms,) = _durations_ms(prof, "accord:all_reduce")
    assert 5 <= ms < 40, ms


def test_an_event_its_opener_never_closed_ends_with_its_profile_not_in_the_next():
    """Closed by an opener recording in the next profile, torch would write the end into
    the stopped profile's freed records: the stop closes what is left."""
    with torch.profiler.profile() as first:
        handle = profiling.begin("broadcast")
        worker = threading.Thread(target=profiling.end, args=(handle,))
        worker.start()
        worker.join()
        assert profiling.HANDED_BACK
    assert not profiling.HANDED_BACK  # closed at the stop
    with torch.profiler.profile() as second:
        profiling.flush()
        profiling.end(profiling.begin("barrier"))
    assert [name for name, _, _ in accord_events(first)] == ["accord:broadcast"]
    assert [name for name, _, _ in accord_events(second)] == ["accord:barrier"]


def test_an_event_still_open_at_the_stop_is_closed_by_it_not_by_its_end_in_the_next_profile():
    """An isend posted before a profiler step and waited for after it: its end, in the next
    profile, must not touch the stopped one's records (torch would write into freed memory)."""
    with torch.profiler.profile() as first:
        handle = profiling.begin("send")
    assert handle.event is None  # the stop closed it
    with torch.profiler.profile() as second:
        profiling.end(handle)  # nothing left to do
        profiling.end(profiling.begin("recv"))
    assert [name for name, _, _ in accord_events(first)] == ["accord:send"]
    assert [name for name, _, _ in accord_events(second)] == ["accord:recv"]


def test_an_event_ended_elsewhere_after_its_profile_stopped_closes_there():
    with torch.profiler.profile():
        handle = profiling.begin("send")
    worker = threading.Thread(target=profiling.end, args=(handle,))
    worker.start()
    worker.join()
    assert not profiling.HANDED_BACK


def test_a_handed_event_ends_exactly_on_the_thread_that_ends_it():
    with torch.profiler.profile() as prof:
        handle = profiling.begin_handed("all_reduce")
        worker = threading.Thread(target=lambda: (time.sleep(0.01), profiling.end(handle)))
        worker.start()
        worker.join()
        time.sleep(0.05)
    (ms,) = _durations_ms(prof, "accord:all_reduce")
    assert 10 <= ms < 40, ms


def test_records_known_threads_only_tells_torchs_default_from_every_thread():
    from torch._C._profiler import _ExperimentalConfig

    with torch.profiler.profile():
        assert profiling.records_known_threads_only()
    with torch.profiler.profile(experimental_config=_ExperimentalConfig(profile_all_threads=True)):
        assert profiling.recording() and not profiling.records_known_threads_only()


def test_accord_never_imports_torch_for_this():
    code = ("import sys, numpy as np, accord\n"
            "from accord import profiling\n"
            "assert not profiling.recording() and profiling.begin_if_recording('send') is None\n"
            "assert 'torch' not in sys.modules, 'accord imported torch'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
