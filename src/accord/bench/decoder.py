"""A small Llama-style decoder in plain torch, its tensor-parallel plan, and greedy decoding:
the model ``examples/tp_decode.py`` runs and ``accord bench --tp`` times.

Owns: the model's modules (RMSNorm, multi-head attention with rotary positions and a KV
cache, SwiGLU MLP), torch's tensor-parallel plan for it (``tp_plan``, as torch's TP tutorial
shards a Llama: q/k/v and the MLP's gate and up projections column-wise, o and down
row-wise, the embedding row-wise and the output head column-wise with replicated logits),
and greedy decoding one token at a time (``decode``). Its shape, ``DecoderConfig``, lives in
``shape`` (no torch). It imports torch only, nothing of accord's, so it runs on any backend
or in one process without torch.distributed. Under the plan each rank keeps heads/world
heads: the attention reads its local head count off q's width, so one module serves both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own idiom)
from torch import nn

from .shape import DecoderConfig

Tensor = torch.Tensor

__all__ = ["DecoderConfig", "Decoder", "build", "decode", "prompt", "tp_plan"]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(head_dim: int, max_seq: int, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos and sin of every position's rotation, [max_seq, head_dim / 2] each."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
    return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary positions on x [batch, seq, heads, head_dim] (halves rotated as pairs)."""
    a, b = x.chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.head_dim, self.max_seq = cfg.hidden // cfg.heads, cfg.max_seq
        self.wq = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.wk = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.wv = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.wo = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.cache: tuple[Tensor, Tensor] | None = None

    def forward(self, x: Tensor, pos: int, cos: Tensor, sin: Tensor) -> Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        heads = q.shape[-1] // self.head_dim  # this rank's heads: all of them, or heads/world
        q, k, v = (t.view(batch, seq, heads, self.head_dim) for t in (q, k, v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if pos == 0 or self.cache is None:  # a new sequence: a new cache
            shape = (batch, self.max_seq, heads, self.head_dim)
            self.cache = (x.new_zeros(shape), x.new_zeros(shape))
        keys, values = self.cache
        keys[:, pos : pos + seq], values[:, pos : pos + seq] = k, v
        keys, values = keys[:, : pos + seq].transpose(1, 2), values[:, : pos + seq].transpose(1, 2)
        mask = None
        if seq > 1:  # a prompt: each position sees itself and what came before
            mask = torch.ones(seq, pos + seq, dtype=torch.bool).tril(diagonal=pos)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) × up(x))."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.hidden, cfg.ffn_width, bias=False)
        self.up = nn.Linear(cfg.hidden, cfg.ffn_width, bias=False)
        self.down = nn.Linear(cfg.ffn_width, cfg.hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.attention_norm, self.attention = RMSNorm(cfg.hidden), Attention(cfg)
        self.mlp_norm, self.mlp = RMSNorm(cfg.hidden), MLP(cfg)

    def forward(self, x: Tensor, pos: int, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.attention(self.attention_norm(x), pos, cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    """tokens [batch, seq] at positions pos… → logits [batch, seq, vocab]."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden)
        self.output = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.cos, self.sin = rotary_tables(cfg.hidden // cfg.heads, cfg.max_seq)

    def forward(self, tokens: Tensor, pos: int) -> Tensor:
        seq = tokens.shape[1]
        if pos + seq > self.cfg.max_seq:
            raise ValueError(f"position {pos + seq} is past max_seq {self.cfg.max_seq}")
        cos, sin = self.cos[pos : pos + seq], self.sin[pos : pos + seq]
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x, pos, cos, sin)
        return self.output(self.norm(x))


def build(cfg: DecoderConfig) -> Decoder:
    """The model with weights from ``cfg.seed``: the same on every rank and in one process."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return Decoder(cfg).eval()


def tp_plan() -> dict[str, Any]:
    """torch's tensor-parallel plan for ``Decoder`` (``parallelize_module(model, mesh, plan)``):
    per layer two all_reduces (after o and after down), one for the embedding, and one
    all_gather of the logits."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "embedding": RowwiseParallel(input_layouts=Replicate()),
        "layers.*.attention.wq": ColwiseParallel(),
        "layers.*.attention.wk": ColwiseParallel(),
        "layers.*.attention.wv": ColwiseParallel(),
        "layers.*.attention.wo": RowwiseParallel(),
        "layers.*.mlp.gate": ColwiseParallel(),
        "layers.*.mlp.up": ColwiseParallel(),
        "layers.*.mlp.down": RowwiseParallel(),
        "output": ColwiseParallel(output_layouts=Replicate()),
    }


def prompt(cfg: DecoderConfig, length: int) -> Tensor:
    """A prompt of ``length`` token ids from ``cfg.seed``, [1, length]."""
    seeded = torch.Generator().manual_seed(cfg.seed + 1)
    return torch.randint(cfg.vocab, (1, length), generator=seeded)


def decode(model: Decoder, prompt_ids: Tensor, tokens: int) -> Iterator[int]:
    """Greedy decoding: yield ``tokens`` ids, the first after the prompt's forward, then one per
    forward of the previous token over the KV cache (time the gaps between yields).

    Under ``no_grad``, not ``inference_mode``: in inference mode every DTensor op of the
    sharded model also went through a Python dispatch mode (torch 2.13, 80 more Python
    dispatches per token here), which doubled a sharded token's time (25 → 14 ms, world 2)."""
    with torch.no_grad():
        logits = model(prompt_ids, 0)
        pos = prompt_ids.shape[1]
        for i in range(tokens):
            next_id = logits[:, -1].argmax(-1)
            yield int(next_id[0])
            if i + 1 < tokens:
                logits = model(next_id[:, None], pos)
                pos += 1
