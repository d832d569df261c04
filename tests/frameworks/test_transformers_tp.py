"""transformers tensor parallelism on backend accord: a tiny Llama-style model (random seeded
weights, saved locally: nothing is downloaded) loaded with tp_plan "auto" on 2 ranks gives the
logits and greedy tokens of gloo's run and of the unsharded model in one process."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from .compare import close, need, on_both  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.multiprocess, pytest.mark.frameworks, pytest.mark.timeout(300)]


def test_tp_plan_auto_decodes_as_on_gloo_and_unsharded(tmp_path) -> None:
    transformers = need("transformers", "Hugging Face transformers")
    from . import programs

    programs.tiny_llama(str(tmp_path))
    alone = programs.llama_outputs(transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)))
    gloo, accord = on_both("transformers_tp", directory=str(tmp_path))
    assert gloo[0]["sharded"] > 0 and gloo[0]["sharded"] == accord[0]["sharded"]  # DTensor weights
    for rank in gloo + accord:
        assert rank["tokens"] == alone["tokens"]
        # a sharded matmul sums in another order than the unsharded one: float rounding apart
        assert not close(alone["logits"], rank["logits"]), close(alone["logits"], rank["logits"])[:5]
    assert [r["logits"] for r in gloo] == [r["logits"] for r in accord]
