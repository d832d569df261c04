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
