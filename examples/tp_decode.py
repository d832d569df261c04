"""Tensor-parallel inference with torch's own tensor parallelism on backend accord: greedy
decoding of a small Llama-style model, sharded over the ranks with ``parallelize_module``.
The only change from gloo is the backend's name.

    accordrun --nproc-per-node 2 examples/tp_decode.py            # accord's launcher
    torchrun --nproc-per-node 2 examples/tp_decode.py             # torch's launcher
    accordrun --nproc-per-node 2 examples/tp_decode.py --backend gloo   # the same on gloo
    python examples/tp_decode.py                                  # one process, no TP

The model (``accord.bench.decoder``: RMSNorm, attention with rotary positions and a KV cache,
SwiGLU MLP, in plain torch) is built from a seed, the same on every rank. Its plan is torch's
TP tutorial's: q, k, v and the MLP's gate and up projections split column-wise, o and down
row-wise (one all_reduce after each), the embedding row-wise and the output head
column-wise (an all_gather of the logits). Every rank prints the same tokens, and they are
the one-process run's. ``accord bench --tp`` times this decoding on accord, gloo and one
process, with the share of each token spent in communication.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

from accord.bench import decoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="accord", help="accord (default) or gloo")
    parser.add_argument("--tokens", type=int, default=32, help="tokens to generate")
    parser.add_argument("--prompt", type=int, default=8, help="prompt length (random ids)")
    shape = decoder.DecoderConfig()  # the defaults: accord bench --tp's
    for name in ("layers", "hidden", "heads", "vocab", "seed"):
        parser.add_argument(f"--{name}", type=int, default=getattr(shape, name))
    args = parser.parse_args()

    torch.set_num_threads(1)  # one core per rank
    cfg = decoder.DecoderConfig(vocab=args.vocab, hidden=args.hidden, layers=args.layers,
                                heads=args.heads, seed=args.seed,
                                max_seq=args.prompt + args.tokens)
    model = decoder.build(cfg)  # every rank the same weights, from the seed
    distributed = "WORLD_SIZE" in os.environ  # started by accordrun or torchrun
    if distributed:
        dist.init_process_group(args.backend)  # env://
        cfg.check(dist.get_world_size())
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        model = parallelize_module(model, mesh, decoder.tp_plan())
    where = (f"rank {dist.get_rank()}/{dist.get_world_size()} ({dist.get_backend()})"
             if distributed else "one process")

    tokens, times = [], []
    start = time.perf_counter()
    for token in decoder.decode(model, decoder.prompt(cfg, args.prompt), args.tokens):
        now = time.perf_counter()
        tokens.append(token)
        times.append(now - start)
        start = now
    print(f"{where} tokens {' '.join(map(str, tokens))}")
    print(f"{where} {1e3 * statistics.median(times[1:] or times):.2f} ms/token (median)")
    if distributed:
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, tokens)
        assert all(t == tokens for t in everyone), "the ranks decoded different tokens"
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
