"""The shape of the benchmark's decoder (``DecoderConfig``): layers, widths, vocabulary, seed.

Owns: the shape and its defaults, and whether a number of ranks can shard it evenly. Imports
no torch, so the command line and the benchmark's parent process can hold a shape without
torch (the model itself is ``decoder``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class DecoderConfig:
    vocab: int = 4096
    hidden: int = 512
    layers: int = 4
    heads: int = 8
    #: the MLP's width; 0: Llama's rule, 8/3 × hidden rounded up to a multiple of 256
    ffn: int = 0
    #: room in the KV cache: prompt plus generated tokens
    max_seq: int = 256
    seed: int = 0

    @property
    def ffn_width(self) -> int:
        return self.ffn or 256 * math.ceil(8 * self.hidden / 3 / 256)

    def check(self, world: int) -> None:
        """ValueError unless ``world`` ranks can shard this shape evenly."""
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise ValueError(f"hidden {self.hidden} must be heads ({self.heads}) × an even head size")
        for what, size in (("heads", self.heads), ("ffn", self.ffn_width), ("vocab", self.vocab)):
            if size % world:
                raise ValueError(f"{what} {size} does not split over {world} ranks")
