"""The differential modules share their jobs (runner.SharedJobs): every collected module that
declares ``SHARED_JOBS`` joins before the first test runs, so that the first job of each
(implementation, world size) runs the scripts of all of them."""

from __future__ import annotations


def pytest_collection_finish(session) -> None:  # noqa: ANN001
    for item in session.items:
        shared = getattr(getattr(item, "module", None), "SHARED_JOBS", None)
        if shared is not None:
            shared.join()
