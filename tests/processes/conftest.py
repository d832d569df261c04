import os

import pytest

from .procs import Job


@pytest.fixture
def start_job():
    """Start a Job (see procs.py); every job is closed (children released, then killed) at
    the end of the test, whatever happened."""
    jobs: list[Job] = []

    def start(scenario: str, world_size: int, ranks: list[int] | None = None, **params) -> Job:
        job = Job(scenario, world_size, ranks, **params)
        jobs.append(job)
        return job.start()

    yield start
    for job in jobs:
        job.close()


def accord_segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("accord-")} if os.path.isdir("/dev/shm") else set()


@pytest.fixture(autouse=True)
def no_segment_left_behind():
    """Whatever happened (kills included), no shared-memory segment outlives a test."""
    before = accord_segments()
    yield
    assert accord_segments() - before == set()
