"""torch.distributed.checkpoint on backend accord: FSDP2 training saved with DCP (model and
optimizer, sharded), resumed in a fresh model and trained on, as on gloo; a checkpoint that
gloo's job wrote loads on accord's with the same values."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from torch_backend import harness  # noqa: E402

from .compare import assert_same  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.frameworks, pytest.mark.timeout(300)]


def test_save_resume_as_on_gloo_and_across_backends(tmp_path) -> None:
    program = "frameworks.programs:dcp_save_resume"
    gloo = harness.run(program, "gloo", 2, directory=str(tmp_path / "gloo"))
    accord = harness.run(program, "accord", 2, directory=str(tmp_path / "accord"))
    assert gloo[0]["files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # one shard per rank
    assert_same(gloo, accord)
    for rank in accord:  # the fresh model became the checkpointed one, and trained on
        assert rank["loaded"] == rank["saved"] != rank["params"] and len(rank["after"]) == 2
    crossed = harness.run(program, "accord", 2, directory=str(tmp_path / "again"),
                          load_from=str(tmp_path / "gloo"))
    assert_same(gloo, crossed)
