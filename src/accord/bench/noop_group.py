"""torch's own cost of a collective's path, for the bench's floor rows: a process group whose
collectives do nothing.

Owns: ``Done`` (a torch ``Work`` finished when it was made), ``NoopGroup`` (a Python
``ProcessGroup`` whose all_reduce returns one at once: what torch's functional and async
paths cost around a backend that costs nothing) and ``noop_group``, which registers the
backend "bench_noop" once per process and makes a group of it (a collective call: every
rank, in the same order). Runs inside the bench's worker processes. Must not know about
the rows or the report.
"""

from __future__ import annotations

from typing import Any

_made: dict[str, Any] = {}


def _classes() -> tuple[Any, Any]:
    """``Done`` and ``NoopGroup``, made on first use (torch is imported only then)."""
    if "classes" in _made:
        return _made["classes"]  # type: ignore[no-any-return]
    import torch
    import torch.distributed as dist

    class Done(dist.Work):
        """A collective that finished when it was issued; its result is ``outputs``."""

        def __init__(self, outputs: list[Any]) -> None:
            super().__init__()
            self._outputs = outputs

        def wait(self, timeout: Any = None) -> bool:
            return True

        def is_completed(self) -> bool:
            return True

        def is_success(self) -> bool:
            return True

        def result(self) -> list[Any]:
            return self._outputs

        def get_future(self) -> torch.futures.Future:
            future: torch.futures.Future[list[Any]] = torch.futures.Future()
            future.set_result(self._outputs)
            return future

    class NoopGroup(dist.ProcessGroup):
        """all_reduce that does nothing and is done at once (others: torch's NotImplemented)."""

        def allreduce(self, tensors: Any, opts: Any = None) -> Done:  # type: ignore[override]
            return Done(list(tensors))

        def getBackendName(self) -> str:  # noqa: N802 (torch's name)
            return "bench_noop"

    _made["classes"] = (Done, NoopGroup)
    return Done, NoopGroup


def done_work(outputs: list[Any]) -> Any:
    """A torch Work finished already, with ``outputs`` as its result."""
    return _classes()[0](outputs)


def noop_group() -> Any:
    """A new torch group of every rank on the no-op backend (registered on first use)."""
    import torch.distributed as dist

    noop = _classes()[1]
    if "registered" not in _made:
        dist.Backend.register_backend(
            "bench_noop",
            lambda store, rank, size, timeout: noop(rank, size),
            extended_api=False,
            devices=["cpu"],
        )
        _made["registered"] = True
    return dist.new_group(backend="bench_noop")
