"""``accord bench --tp``'s floor: tensor parallelism whose per-token collectives cost nothing.

Owns: ``install``, which makes the torch backend accord's all_reduce and all_gathers of this
process complete at once without moving a byte (an all_reduce leaves each rank's partial
sum, an all_gather fills every rank's block with this rank's own), after the model was
sharded with the real ones. A token then costs what torch's tensor parallelism costs on
its own (DTensor's dispatch, the functional ops, the sharded compute) with free
communication: ``accord − free`` in ms per token is what communication costs accord,
measured without the profiler. The sums are wrong, so the ranks decode other tokens than
the real runs (the shapes, and so the compute, are the same). Only for a bench worker
process: it changes the backend class for the whole process.

``install(sync=True)``: the same, but each collective is one blocking barrier of accord's on
the group (a few µs) and moves nothing: what a token costs when every collective only waits
for every rank, as an exchange must (a rank cannot have the sum before the slowest rank made
its part). Not a strict floor for every backend: it includes accord's barrier latency and
overlaps nothing with compute. ``accord − sync`` is what accord's data movement and its own
path cost beyond that wait; ``sync − free`` is what the ranks' waiting for each other (and
the barriers) costs tensor parallelism.
Must not know about the decoding or the report.
"""

from __future__ import annotations

from typing import Any


def install(sync: bool = False) -> None:
    """Make this process's accord collectives of the decode free, or (``sync``) cost one
    barrier each (see the module docstring)."""
    from ..group import collective_ops
    from ..integrations.torch import AccordProcessGroup
    from .noop_group import done_work

    def done(pg: Any, outputs: list[Any]) -> Any:
        if sync:
            collective_ops.barrier(pg.accord_group, False)
        return done_work(outputs)

    def fill(output: Any, input: Any) -> None:  # noqa: A002
        """Every block of ``output`` (dim 0, one per rank) gets ``input``: what a gather
        writes, from this rank's data alone."""
        if input.numel():
            blocks = output.view(-1, input.numel())
            blocks.copy_(input.reshape(1, -1).expand_as(blocks))

    def allreduce(self: Any, tensors: Any, opts: Any = None) -> Any:
        return done(self, list(tensors) if isinstance(tensors, list) else [tensors])

    def all_gather_single(self: Any, output: Any, input: Any, opts: Any = None) -> Any:  # noqa: A002
        fill(output, input)
        return done(self, [output])

    def all_gather_single_coalesced(self: Any, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        for output, input in zip(outputs, inputs):  # noqa: A001
            fill(output, input)
        return done(self, list(outputs))

    def allgather(self: Any, output_tensors: Any, input_tensors: Any, opts: Any = None) -> Any:
        for outputs, input in zip(output_tensors, input_tensors):  # noqa: A001
            for out in outputs:
                out.copy_(input)
        return done(self, list(output_tensors))

    AccordProcessGroup.allreduce = allreduce  # type: ignore[method-assign]
    AccordProcessGroup.all_gather_single = all_gather_single  # type: ignore[method-assign]
    AccordProcessGroup._allgather_base = all_gather_single
    AccordProcessGroup.all_gather_single_coalesced = all_gather_single_coalesced  # type: ignore[method-assign]
    AccordProcessGroup.allgather_into_tensor_coalesced = all_gather_single_coalesced
    AccordProcessGroup.allgather = allgather  # type: ignore[method-assign]
