"""One optimizer step, and nothing else: the state it touches, forward+backward over a window, the update.

One optimizer step ("a window") is:
  1. forward + backward on `accum` micro-batches, each loss divided by the number of target tokens in
     the WHOLE window, so the summed gradients equal those of one big batch;
  2. (fp16) unscale the gradients, then clip their norm, then step the optimizer; a step the GradScaler
     skips because of inf/NaN gradients does not advance the learning-rate schedule;
  3. zero the gradients (set_to_none frees their memory until the next backward).
Under torchrun each process takes its own slice of the window's micro-batches and DDP averages the
gradients, syncing only on the last micro-batch; --shard zero1 / fsdp split the state (minigpt.parallel).
No files and no printing here: the loop (minigpt.train) and the meters (minigpt.memory) both run this step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

from minigpt import parallel
from minigpt.config import TrainConfig, lr_at
from minigpt.data import TokenData
from minigpt.lora import add_adapters, has_adapters, initial_sha256, load_trainable, trainable_state
from minigpt.model import GPT, IGNORE_INDEX, ModelConfig
from minigpt.offload import ActivationOffloader, open_offload_file
from minigpt.offload import saving as offload_saving
from minigpt.optim import MasterWeights, make_optimizer
from minigpt.optim.in_backward import StepInBackward
from minigpt.precision import autocast_context


def forward_backward(
    model: nn.Module,
    micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    precision: str,
    scaler: torch.amp.GradScaler | None = None,
    offload: ActivationOffloader | None = None,
) -> torch.Tensor:
    """Accumulate the gradients of one window; return the window's mean loss per target token.

    Each micro-batch's summed loss is divided by the number of counted targets in the whole window
    (across all processes under DDP), not averaged per micro-batch: a mean of per-micro-batch means
    over-weights the tokens of short (padded) micro-batches. The loss comes back as a 0-dim tensor on
    `device`: float(loss) reads it, and on a GPU that waits until the queued work is done.
    Memory stays the same whatever the number of micro-batches: they are read one at a time (a
    WindowBatches builds each when it is read) and their losses go into one running sum.
    `offload` (entered by the caller, see new_offloader) moves each forward's saved tensors off the device.
    """
    n_tokens = sum(int((y != IGNORE_INDEX).sum()) for _, y in micro_batches)  # one micro-batch at a time
    n_tokens, world = parallel.sum_across_processes(n_tokens), parallel.world_size()
    if n_tokens == 0:
        raise ValueError("every target in this window is IGNORE_INDEX: nothing to learn from")
    if len(micro_batches) > 1 and world == 1:
        # The gradients get their memory before the first forward, where the later micro-batches need it anyway.
        # Made by the first backward instead, they would sit among the activations it frees, the next
        # micro-batch's activations would not fit in the gaps, and the process would grow by that much.
        # (Every trainable parameter of the GPT takes part in each forward, so each gets a gradient regardless.)
        for p in model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
    # The window's summed loss so far: one tensor, made after the first backward (so it is no part of what the
    # forward keeps) and added to in place, so no new tensor outlives a later micro-batch
    total = None
    for i, (x, y) in enumerate(micro_batches):
        is_last = i == len(micro_batches) - 1
        # Under DDP or FSDP, skip the gradient all-reduce on every micro-batch but the last. no_sync must be
        # entered before the forward pass: DDP prepares its reduction hooks there.
        sync = contextlib.nullcontext() if is_last else parallel.no_gradient_sync(model)
        with sync:
            with offload_saving(offload), autocast_context(device, precision):  # forward and loss only
                summed = model(x.to(device), y.to(device), reduction="sum")[1]  # the logits go at once
            # DDP (and FSDP) average over processes, so multiply back by the world size to get a global sum.
            loss = summed * world / n_tokens
            (scaler.scale(loss) if scaler is not None else loss).backward()
        if offload is not None:
            offload.release()  # this micro-batch's offloaded bytes are used: the next forward reuses the space
        # One running sum, not a list of losses (which grows with accum, one small tensor per micro-batch, and
        # keeps the heap from being reused), kept on the device: summed.item() here would make the CPU wait
        # for the GPU every micro-batch.
        total = summed.detach().clone() if total is None else total.add_(summed.detach())
    return parallel.sum_across_processes(total) / n_tokens


@dataclass
class StepState:
    """Everything an optimizer step touches: the model and what updates it."""

    model: GPT
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None  # fp16 only
    master: MasterWeights | None  # bf16-pure with master_weights only
    forward: nn.Module  # what runs the forward: the model, or torch.compile(model) (same parameters)
    in_backward: StepInBackward | None = None  # --optimizer-in-backward: the hooks that step during backward
    offload_activations: bool = False  # --offload-activations: each window runs under a new_offloader
    offload_dir: str | None = None  # where its temp file goes on a CPU (None: TMPDIR)

    @property
    def train_params(self) -> list[torch.Tensor]:
        """The tensors AdamW updates: the fp32 master copies if there are any, else the model's own."""
        return self.master.params if self.master else trainable_params(self.model)


def trainable_params(model: nn.Module) -> list[torch.Tensor]:
    """The parameters that require grad: all of them, or under LoRA the adapters (and what --train-* adds)."""
    return [p for p in model.parameters() if p.requires_grad]


def model_from_weights(model_cfg: ModelConfig, weights: dict, device: torch.device) -> GPT:
    """A GPT whose parameters are the `weights` tensors themselves: built on the meta device, so no seeded
    init is allocated beside them (a 125m base would otherwise be held twice while it loads)."""
    with torch.device("meta"):
        model = GPT(model_cfg, seed=None)  # shapes only; its RoPE tables are made on the CPU as always
    model.load_state_dict(weights, assign=True)  # wrong names or shapes fail here, as a copy would
    model.lm_head.weight = model.tok_emb.weight  # assign gave each name its own Parameter: tie them again
    return model.to(device)


def build_step_state(
    model_cfg: ModelConfig, cfg: TrainConfig, device: torch.device, base: dict | None = None
) -> StepState:
    """The model (seeded init, checkpointing mode, dtype for the precision) and its optimizer, schedule, scaler.

    `base`: the weights to start from (--init-from). With --lora-rank the model is frozen and only adapters
    (minigpt.lora) train, so the optimizer gets only what requires grad.
    """
    if base is None:
        model = GPT(model_cfg, seed=cfg.seed).to(device)
        if cfg.lora_rank and cfg.out:  # this init is the run's frozen base, saved by its hash: hash it now, whole
            initial_sha256(model_cfg, cfg.seed, model.state_dict())
    else:
        model = model_from_weights(model_cfg, base, device)
        del base  # the model holds the tensors now: each one add_adapters replaces is freed at once
    if cfg.lora_rank:
        adapter_settings = (cfg.lora_alpha, cfg.lora_targets, cfg.base_dtype, cfg.quant_block)
        add_adapters(model, cfg.lora_rank, *adapter_settings, cfg.train_norms, cfg.train_embedding, cfg.seed)
    model.checkpointing = cfg.checkpointing
    model.loss_chunks = cfg.loss_chunks
    if cfg.offload_activations and device.type != "cuda":  # a folder we cannot write: say so before any work
        open_offload_file(cfg.offload_dir).close()
    if cfg.precision == "bf16-pure":
        model.to(torch.bfloat16)  # weights, and so gradients and AdamW state, all in bf16
    fsdp = cfg.shard == "fsdp" and parallel.world_size() > 1
    if fsdp:  # before the optimizer and the master copies: they must see the sharded parameters
        parallel.shard_model(model, cfg.precision)
    master = MasterWeights(model) if cfg.master_weights else None
    optimizer = make_optimizer(master.params if master else trainable_params(model), cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, cfg))
    scaler = None
    if cfg.precision == "fp16":  # under FSDP each process sees only its slice of the gradients: the scaler
        # must agree over all processes whether any slice overflowed, which ShardedGradScaler does
        scaler = parallel.sharded_grad_scaler(device.type) if fsdp else torch.amp.GradScaler(device.type)
    forward = torch.compile(model) if cfg.compile else model
    in_backward = None
    if cfg.optimizer_in_backward:
        if parallel.world_size() > 1:  # DDP averages each gradient after it is complete: too late for the hooks
            raise ValueError(
                "--optimizer-in-backward under torchrun: the gradients are averaged over the processes "
                "after the step in backward has used them; train on one process"
            )
        in_backward = StepInBackward(trainable_params(model), optimizer, master)
    state = StepState(model, optimizer, scheduler, scaler, master, forward, in_backward)
    state.offload_activations, state.offload_dir = cfg.offload_activations, cfg.offload_dir
    return state


def new_offloader(state: StepState, device: torch.device) -> ActivationOffloader | None:
    """The activation offloader of one window (None without --offload-activations); enter it around the window."""
    if not state.offload_activations:
        return None
    return ActivationOffloader([*state.model.parameters(), *state.model.buffers()], device, state.offload_dir)


def optimizer_step(state: StepState, grad_clip: float) -> tuple[torch.Tensor, float, float | None, bool]:
    """Unscale (fp16), clip, step AdamW, advance the schedule unless the step was skipped, zero the grads.

    Returns (grad norm before clipping as a 0-dim tensor on the device, lr used, loss scale used or None,
    whether the step was skipped).
    """
    optimizer, scaler = state.optimizer, state.scaler
    if state.in_backward is not None:  # every parameter was stepped during backward (optim/in_backward.py)
        lr = state.scheduler.get_last_lr()[0]  # what the hooks used: the schedule moves only now
        grad_norm, _ = state.in_backward.finish()
        state.scheduler.step()
        return grad_norm, lr, None, False
    if state.master:
        state.master.grads_to_master()
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    clip = grad_clip if grad_clip > 0 else float("inf")
    grad_norm = parallel.full_tensor(torch.nn.utils.clip_grad_norm_(state.train_params, clip))  # FSDP: a DTensor
    lr = optimizer.param_groups[0]["lr"]  # the lr this step uses, read where AdamW reads it
    if scaler is not None:
        scale = scaler.get_scale()
        scaler.step(optimizer)  # skipped if the gradients hold inf/NaN
        scaler.update()  # halves the scale after a skip, grows it after 2000 clean steps
        skipped = scaler.get_scale() < scale
    else:
        scale, skipped = None, False
        optimizer.step()
    if not skipped:
        state.scheduler.step()  # a skipped step is not a step of the schedule
    optimizer.zero_grad(set_to_none=True)  # frees the gradients' memory until the next backward
    if state.master:
        state.master.master_to_model()
    return grad_norm, lr, scale, bool(skipped)


def train_step(
    state: StepState,
    micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    precision: str,
    grad_clip: float = 1.0,
    module: nn.Module | None = None,
) -> dict:
    """One optimizer step on one window of micro-batches: forward_backward, then optimizer_step.

    `module` is what runs the forward: the DDP wrapper under torchrun (default: state.forward, the model or its
    compiled version).
    """
    module = state.forward if module is None else module
    offload = new_offloader(state, device)
    with offload or contextlib.nullcontext():  # its temp file is closed (and so gone) however the window ends
        loss = forward_backward(module, micro_batches, device, precision, state.scaler, offload)
    grad_norm, lr, scale, skipped = optimizer_step(state, grad_clip)
    # Read loss and grad norm only now, with the whole step queued: each read waits for the GPU to catch up,
    # and a wait in mid-step leaves the GPU idle while the CPU queues the rest (fp16's scaler still waits).
    return {"loss": loss.item(), "lr": lr, "grad_norm": grad_norm.item(), "scale": scale, "skipped": skipped}


class WindowBatches(Sequence):
    """The micro-batches of one window, each built from the token data only when it is read.

    A window drawn as tensors all at once holds batch x accum x ctx tokens twice (x and y) before its first
    forward: memory that grows with --accum, which accumulation exists to avoid. This keeps one start
    position per sequence and builds micro-batch i, `batch` sequences, when the step reads it.
    """

    def __init__(self, data: TokenData, starts: torch.Tensor, batch: int, ctx: int) -> None:
        self.data, self.starts, self.batch, self.ctx = data, starts, batch, ctx

    def __len__(self) -> int:
        return -(-len(self.starts) // self.batch)  # ceiling division

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"micro-batch {i} of a window of {len(self)}")
        return self.data.batch_at("train", self.starts[i * self.batch : (i + 1) * self.batch], self.ctx)


def window_micro_batches(
    data: TokenData, cfg: TrainConfig, gen: torch.Generator, rank: int = 0, world: int = 1
) -> WindowBatches:
    """This process's micro-batches of the next window: `accum` pairs (x, y) of `batch` sequences each.

    Every process draws the same window of batch * accum * world sequences and takes its own slice, so the
    effective batch is the same sequences whatever the number of processes. Only the start positions are
    drawn now; each micro-batch's tokens are read when the step gets to it.
    """
    n_window = cfg.batch * cfg.accum
    starts = data.draw_starts("train", n_window * world, cfg.ctx, gen)[rank * n_window : (rank + 1) * n_window]
    return WindowBatches(data, starts, cfg.batch, cfg.ctx)


def gather_checkpoint(state: StepState) -> dict:
    """The model, master copies and optimizer state, whole, as one process would save them (every process calls this).

    Process 0 gets everything; under zero1 the others get optimizer None (ZeroRedundancyOptimizer
    consolidates on process 0 only).
    """
    return {
        "model": parallel.full_model_state(state.model),
        "master": [parallel.full_tensor(m).cpu() for m in state.master.params] if state.master else None,
        "optimizer": parallel.full_optimizer_state(state.optimizer),
    }


def shard_checkpoint(saved: dict, state: StepState) -> dict:
    """A whole checkpoint cut the way this process's step state is (FSDP: each keeps its slices); else unchanged."""
    model_now = state.model.state_dict()
    params = [p for group in state.optimizer.param_groups for p in group["params"]]  # AdamW's order of indices
    cut = dict(saved)
    cut["model"] = {k: parallel.shard_like(v, model_now.get(k, v)) for k, v in saved["model"].items()}
    if state.master and saved["master"] is not None:
        cut["master"] = [parallel.shard_like(v, m) for v, m in zip(saved["master"], state.master.params)]
    cut["optimizer"] = parallel.shard_optimizer_state_like(saved["optimizer"], params)
    return cut


def unsharded_model(model: GPT, cfg: TrainConfig, device: torch.device) -> GPT:
    """A plain GPT holding the whole weights of an FSDP-sharded one (every process must call this)."""
    whole = GPT(model.cfg, seed=cfg.seed).to(device)
    if cfg.precision == "bf16-pure":
        whole.to(torch.bfloat16)
    whole.load_state_dict(parallel.full_model_state(model))
    return whole


class DifferentModel(ValueError):
    """A checkpoint's model has other names or shapes than the one this config builds."""


def step_checkpoint(state: StepState, whole: dict | None = None) -> dict:
    """What a checkpoint holds of the step: model, master copies, optimizer, schedule and scaler states.

    `whole` (gather_checkpoint's, under --shard) replaces the model, master and optimizer entries, which this
    process holds only a slice of.
    """
    entries = {
        "scheduler": state.scheduler.state_dict(),
        "scaler": state.scaler.state_dict() if state.scaler is not None else None,
    }
    if whole is not None:
        return {**whole, **entries}
    return {
        # a LoRA run saves only what it trains; its frozen base is the --init-from run's (train.py checks its hash)
        "model": trainable_state(state.model) if has_adapters(state.model) else state.model.state_dict(),
        "master": [m.detach() for m in state.master.params] if state.master else None,
        "optimizer": state.optimizer.state_dict(),
        **entries,
    }


def restore_step(state: StepState, saved: dict) -> None:
    """Load step_checkpoint's entries back into `state`; DifferentModel if the saved model has other shapes."""
    try:
        if has_adapters(state.model):
            load_trainable(state.model, saved["model"])
        else:
            state.model.load_state_dict(saved["model"])
    except (RuntimeError, ValueError) as err:  # names or shapes that do not fit: a checkpoint from another model
        raise DifferentModel(str(err)) from None
    if state.master:
        for (_, m), value in zip(state.master.pairs, saved["master"]):
            m.data.copy_(value)
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scheduler.load_state_dict(saved["scheduler"])
    if state.scaler is not None:
        state.scaler.load_state_dict(saved["scaler"])


def follow_schedule(state: StepState, cfg: TrainConfig) -> float:
    """After restore_step: from the saved step on, the learning rate follows `cfg`'s schedule; return the next lr.

    A checkpoint holds the lr its run was using (the optimizer's) and its peak --lr (the schedule's base): a
    resumed run would go on with those, whatever --lr or --steps it was given. This puts the given settings
    in their place: step s then uses cfg.lr * lr_at(s, cfg), the lr a run started with these settings would
    use at step s. (The schedule counts the steps it took; fp16 steps skipped on inf/NaN are not among them.)
    """
    lr = cfg.lr * lr_at(state.scheduler.last_epoch, cfg)
    state.scheduler.base_lrs = [cfg.lr for _ in state.optimizer.param_groups]
    for group in state.optimizer.param_groups:
        group["initial_lr"], group["lr"] = cfg.lr, lr
    state.scheduler._last_lr = [lr for _ in state.optimizer.param_groups]  # what get_last_lr() reports
    return lr
