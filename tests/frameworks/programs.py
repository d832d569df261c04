"""Per-rank programs of the framework recipes (``docs/guides/frameworks.md``): each runs on
whatever backend the harness (``tests/torch_backend/harness.py``) or the program itself starts,
on 2 CPU ranks with a tiny seeded model, and returns plain data (losses, parameters, outputs)
for the test to compare between gloo and accord.

Each program is the recipe's code, less the printing: what a user copies from the guide is
what runs here. Inputs derive from a fixed seed and the rank, so both backends see the same.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn


def _params(model: nn.Module) -> dict[str, list[float]]:
    return {name: _full(p).detach().reshape(-1).tolist() for name, p in model.named_parameters()}


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (a collective: every rank calls it), a plain tensor as it is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


# -- torch.distributed.pipelining ------------------------------------------------------------------
def pipeline_gpipe(rank: int, world_size: int, steps: int = 3, microbatches: int = 4) -> dict[str, Any]:
    """A 5-layer MLP cut into one stage per rank, trained with ScheduleGPipe (the stages
    exchange activations and gradients with send/recv); the last stage's losses, every
    stage's parameters."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    layers = list(_mlp())
    cut = [round(i * len(layers) / world_size) for i in range(world_size + 1)]
    stage_module = nn.Sequential(*layers[cut[rank] : cut[rank + 1]])
    stage = PipelineStage(stage_module, rank, world_size, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=microbatches, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(stage_module.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(7)
    losses: list[float] = []
    for _ in range(steps):
        x, y = torch.randn(8, 8, generator=gen), torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == world_size - 1:
            step_losses: list[torch.Tensor] = []
            schedule.step(target=y, losses=step_losses)
            losses.append(sum(loss.item() for loss in step_losses) / len(step_losses))
        else:
            schedule.step()
        opt.step()
    return {"losses": losses, "params": _params(stage_module)}


# -- torch.distributed.checkpoint ------------------------------------------------------------------
def dcp_save_resume(rank: int, world_size: int, directory: str, load_from: str = "") -> dict[str, Any]:
    """FSDP2 training, checkpointed with DCP (model and optimizer, sharded), resumed in a fresh
    model from the checkpoint (``load_from``'s, another job's, when given) and trained on."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard

    def sharded(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
        model = _mlp(seed)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int) -> list[float]:
        gen = torch.Generator().manual_seed(seed + rank)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(torch.randn(4, 8, generator=gen)),
                                          torch.randn(4, 4, generator=gen))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    model, opt = sharded(0)
    before = train(model, opt, 3, 100)
    saved = _params(model)
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory)
    dist.barrier()

    fresh, fresh_opt = sharded(1)  # other weights: the load must replace them all
    model_sd, optim_sd = get_state_dict(fresh, fresh_opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=load_from or directory)
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    loaded = _params(fresh)
    after = train(fresh, fresh_opt, 2, 200)
    return {"before": before, "saved": saved, "loaded": loaded, "after": after, "params": _params(fresh),
            "files": sorted(os.listdir(directory))}


# -- PyTorch Lightning -----------------------------------------------------------------------------
def lightning_fit(rank: int, world_size: int, backend: str, steps: int = 4) -> dict[str, Any]:
    """Trainer.fit with DDPStrategy(process_group_backend=backend) in processes a launcher
    started (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT set): Lightning makes the
    process group itself. Every step's loss, the final parameters."""
    import lightning
    from lightning.pytorch.strategies import DDPStrategy

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()
            self.losses: list[float] = []

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    gen = torch.Generator().manual_seed(3)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=gen),
                                          torch.randn(64, 4, generator=gen))
    loader = torch.utils.data.DataLoader(data, batch_size=8)  # Lightning adds a DistributedSampler
    module = Module()
    trainer = lightning.Trainer(
        accelerator="cpu", devices=world_size, strategy=DDPStrategy(process_group_backend=backend),
        max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, loader)
    return {"backend": dist.get_backend(), "losses": module.losses, "params": _params(module.net)}


# -- Hugging Face accelerate -----------------------------------------------------------------------
def accelerate_train(rank: int, world_size: int, backend: str, steps: int = 4) -> dict[str, Any]:
    """accelerate on CPU. On gloo, Accelerator(cpu=True) makes the group itself. On any other
    backend it refuses the name (it allows only gloo and mpi on CPU), so the recipe makes the
    group first, then Accelerator(cpu=True) uses the one it finds. Returns the refusal's text
    (as seen here), how many processes Accelerator() without cpu=True sees, accelerate's idea of the backend and the real one, every step's loss
    gathered from both ranks, and the final parameters."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import InitProcessGroupKwargs

    refusal, without_cpu = "", 0
    if backend != "gloo":
        try:
            Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend=backend)])
        except ValueError as exc:
            refusal = str(exc)
        AcceleratorState._reset_state(reset_partial_state=True)
        dist.init_process_group(backend)  # the workaround: the group first, then Accelerator
        without_cpu = Accelerator().num_processes  # cpu=True left out: 1, each rank alone
        AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(cpu=True)

    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(5)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=gen),
                                          torch.randn(64, 4, generator=gen))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    losses: list[list[float]] = []
    for step, (x, y) in enumerate(loader):
        if step == steps:
            break
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        losses.append(accelerator.gather(loss.detach()).tolist())
    return {"refusal": refusal, "without_cpu": without_cpu, "state_backend": accelerator.state.backend, "backend": dist.get_backend(),
            "processes": accelerator.num_processes, "losses": losses,
            "params": _params(accelerator.unwrap_model(model))}


# -- transformers tensor parallelism ---------------------------------------------------------------
def tiny_llama(directory: str) -> None:
    """A 2-layer Llama-style model of random (seeded) weights, saved where from_pretrained
    finds it: nothing is downloaded."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    LlamaForCausalLM(config).save_pretrained(directory)


def llama_outputs(model: nn.Module) -> dict[str, Any]:
    """The logits of a fixed prompt and 6 greedily generated tokens."""
    prompt = torch.arange(3, 13).reshape(1, 10)
    with torch.no_grad():
        logits = model(prompt).logits
        tokens = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    return {"logits": logits[0, -1].tolist(), "tokens": tokens[0].tolist()}


def transformers_tp(rank: int, world_size: int, directory: str) -> dict[str, Any]:
    """from_pretrained with tp_plan "auto" on the process group the harness made (here, as in
    a script, init_process_group comes first: transformers would make a gloo group on CPU)."""
    from transformers import AutoModelForCausalLM, DistributedConfig

    model = AutoModelForCausalLM.from_pretrained(
        directory, distributed_config=DistributedConfig(tp_plan="auto"), dtype=torch.float32
    )
    sharded = [name for name, p in model.named_parameters() if hasattr(p, "placements")]
    return {"backend": dist.get_backend(), "sharded": len(sharded), **llama_outputs(model)}


# -- Ray Train -------------------------------------------------------------------------------------
def ray_train_loop(config: dict[str, Any]) -> None:
    """TorchTrainer's per-worker loop: Ray Train made the process group (TorchConfig's backend)
    and set MASTER_ADDR to the node's address. DDP on a tiny MLP; each worker writes its
    losses and final parameters to ``config["out"]``/rank<r>.json, with whether accord warned
    that it listens beyond loopback."""
    import json

    import ray.train
    import ray.train.torch

    rank = ray.train.get_context().get_world_rank()
    model = ray.train.torch.prepare_model(_mlp())  # DistributedDataParallel on CPU
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(11 + rank)
    losses = []
    for _ in range(config.get("steps", 4)):
        opt.zero_grad()
        x, y = torch.randn(8, 8, generator=gen), torch.randn(8, 4, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    warned = None
    if dist.get_backend() == "accord":
        from accord import auth

        warned = auth._warned.is_set()
    result = {"backend": dist.get_backend(), "master_addr": os.environ.get("MASTER_ADDR"),
              "warned": warned, "losses": losses, "params": _params(model.module)}
    with open(os.path.join(config["out"], f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
