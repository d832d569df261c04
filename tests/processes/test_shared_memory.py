"""Shared memory between real processes: every collective at every size class for world
sizes 1-5, and two jobs side by side on one host. (Every test in this directory also checks
that nothing is left in /dev/shm: conftest.py.)"""

from __future__ import annotations

import pytest

from .procs import free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_every_collective_over_shared_memory(start_job, world_size):
    job = start_job("shared_memory", world_size, port=free_port(), slot_bytes=16 << 10)
    reports = job.expect("done", timeout=100)
    for rank, report in reports.items():
        assert report.ok, report
        others = sorted(set(range(world_size)) - {rank})
        assert report.info["shared"] == (world_size > 1), report
        assert report.info["rings"] == others, report  # p2p to every local peer via rings


def test_tcp_only_when_asked(start_job):
    job = start_job("shared_memory", 2, port=free_port(), slot_bytes=16 << 10, transport="tcp")
    for report in job.expect("done", timeout=100).values():
        assert report.ok and not report.info["shared"] and report.info["rings"] == [], report


def test_two_jobs_side_by_side_on_one_host(start_job):
    jobs = [start_job("shared_memory", 3, port=free_port(), slot_bytes=16 << 10, loops=3)
            for _ in range(2)]
    for job in jobs:
        for report in job.expect("done", timeout=110).values():
            assert report.ok and report.info["shared"], report
