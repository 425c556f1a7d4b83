"""Measure the memory of one real training step: the step minigpt.step builds and runs, metered.

measure() builds the step with step.build_step_state, runs step.forward_backward then step.optimizer_step
(what step.train_step does), and counts the terms of MemoryBreakdown on the real tensors with two meters:
SavedTensorMeter (saved_tensors_hooks: what autograd saves) and LiveTensorTracker (a TorchDispatchMode
that sees every op: what is alive, op by op). Hooks tell the meters where the step is: module hooks in the
forward and the backward, the gap between forward_backward and optimizer_step for the end of backward, and
an optimizer step post-hook for the end of AdamW's step, before optimizer_step frees the gradients.

The meters are in meters.py; memory_snapshot() and memory_timeline() (pictures.py) record the same steps.
"""

from __future__ import annotations

import contextlib

import torch

from minigpt import step
from minigpt.config import TrainConfig
from minigpt.memory.breakdown import MemoryBreakdown, check_shape
from minigpt.memory.meters import LiveTensorTracker, SavedTensorMeter
from minigpt.model import GPT, ModelConfig
from minigpt.precision import autocast_context, check_precision, normalize_precision

# ----------------------------------------------------------------------------------------------------------
# measure(): one real training step, metered


def prepare_step(
    cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str,
    checkpointing: str,
    master_weights: bool,
    device: torch.device,
    seed: int,
) -> tuple[step.StepState, TrainConfig, tuple]:
    """Check the arguments; build the step with minigpt.step.build_step_state; make one batch of tokens.

    The TrainConfig carries the step's settings and train's default hyperparameters (its preset and ctx
    are not used: the model is `cfg`).
    """
    check_shape(cfg, batch, ctx)
    train_cfg = TrainConfig(precision=precision, checkpointing=checkpointing, master_weights=master_weights, seed=seed)
    check_precision(device, precision)  # refuses a precision this device would silently ignore
    torch.manual_seed(seed)  # dropout masks, seeded as train() seeds them
    state = step.build_step_state(cfg, train_cfg, device)
    state.model.train()
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1), generator=gen)
    xy = (tokens[:, :-1].clone().to(device), tokens[:, 1:].clone().to(device))  # two tensors, as loaders give
    return state, train_cfg, xy


def _adamw_state(optimizer: torch.optim.Optimizer, keys: tuple[str, ...] | None = None):
    """AdamW's state tensors (`keys` of each parameter's state, or all of them: moments and step counters)."""
    return (v for s in optimizer.state.values() for k, v in s.items() if keys is None or k in keys)


def _storages(tensors, device_type: str) -> dict[int, int]:
    """{storage address: bytes} of the tensors on that type of device, each storage once."""
    return {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in tensors
        if t is not None and t.device.type == device_type
    }


@contextlib.contextmanager
def _phase_marks(model: GPT, tracker: LiveTensorTracker, saved: SavedTensorMeter, end: dict):
    """Hooks that tell the meters where the step is: forward, loss head, backward through the blocks..."""

    def phase(name):
        return lambda *_: tracker.set_phase(name)

    def on_grad(name):  # the gradient reaching this module's output means backward has got past it
        def hook(module, args, output):
            output.register_hook(phase(name))

        return hook

    def end_of_forward(module, args, output):
        end.update(
            alive=tracker.live_records(),
            saved=saved.alive(),
            outputs={t.untyped_storage().data_ptr() for t in output if t is not None},
        )
        tracker.set_phase("backward: loss head")
        saved.enabled = False  # what the loop saves after the model (GradScaler's scale) is not activations

    handles = [
        model.final_norm.register_forward_hook(on_grad("backward: blocks")),
        model.tok_emb.register_forward_hook(on_grad("backward: embedding")),
        model.register_forward_hook(end_of_forward),
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _kept_for_backward(tracker: LiveTensorTracker, end: dict) -> tuple[dict[int, int], dict[int, int]]:
    """{address: bytes} of what the forward left for backward: all of it, and the part the hooks saw.

    All of it = the saved tensors (hooks) + the storages the forward made that are still alive at its
    end (the same ones, plus selective checkpointing's cache), without autocast's weight copies and
    without what the model returned (logits, loss).
    """
    alive = [r for r in tracker.records if r["index"] in end["alive"]]
    copies = {r["ptr"] for r in alive if r["weight_copy"]}
    hooked = {ptr: n for ptr, n in end["saved"].items() if ptr not in copies}
    made = {r["ptr"]: r["bytes"] for r in alive if not r["weight_copy"] and r["ptr"] not in end["outputs"]}
    return {**made, **hooked}, hooked


def measure_activations(
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> int:
    """measure()'s activations from a training forward alone: no backward, no AdamW, so much quicker."""
    precision, device = normalize_precision(precision), torch.device(device)
    state, _, (x, y) = prepare_step(model_cfg, batch, ctx, precision, checkpointing, False, device, seed)
    model = state.model
    tracker, saved = LiveTensorTracker(list(model.parameters()), device.type), SavedTensorMeter(model)
    end: dict = {}
    with _phase_marks(model, tracker, saved, end), tracker, saved, autocast_context(device, precision):
        model(x, y, reduction="sum")  # as step.forward_backward calls it
    return sum(_kept_for_backward(tracker, end)[0].values())


def measure(
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    master_weights: bool = False,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> MemoryBreakdown:
    """Run one real training step (train's forward, backward, clipping, AdamW) and count its memory by kind.

    Measured: weights, gradients, optimizer (the real tensors, each storage once); activations (what
    saved_tensors_hooks sees in the forward, plus what is still alive at its end, such as selective
    checkpointing's cache); each transient term and each moment (the largest live bytes, op by op, from
    a LiveTensorTracker). AdamW makes its state inside the first step(); every later step carries it
    through forward and backward, so it is added to those moments. device_peak: on CUDA,
    torch.cuda.max_memory_allocated over a step that follows a warm-up step (it also counts what
    libraries allocate through PyTorch, such as cuBLAS's workspace, and the allocator's rounding);
    elsewhere the largest moment.
    """
    precision, device = normalize_precision(precision), torch.device(device)
    state, train_cfg, xy = prepare_step(model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed)
    model, optimizer = state.model, state.optimizer
    if device.type == "cuda":  # a warm-up step, so the measured one starts with AdamW's state allocated
        step.train_step(state, [xy], device, precision, train_cfg.grad_clip)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)

    all_params, kind = list(model.parameters()) + (state.master.params if state.master else []), device.type
    existing = _storages([*all_params, *model.buffers(), *xy, *_adamw_state(optimizer)], kind)
    tracker, saved, end = LiveTensorTracker(all_params, kind), SavedTensorMeter(model), {}

    def backward_done() -> None:  # bf16-pure + master: backward's bf16 grads become fp32 ones next
        made = {p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None}
        end["grads_made"] = {i for i in tracker.live_records() if tracker.records[i]["ptr"] in made}
        tracker.set_phase("optimizer")

    def adamw_done(*_) -> None:  # AdamW has stepped: optimizer_step frees the gradients next, so look now
        end["grads"] = _storages((p.grad for p in state.train_params), kind)
        end["state"] = _storages(_adamw_state(optimizer), kind)
        end["moments"] = _storages(_adamw_state(optimizer, ("exp_avg", "exp_avg_sq")), kind)
        tracker.stop()  # the rest of optimizer_step (scaler update, schedule, zero_grad) is not metered

    optimizer.register_step_post_hook(adamw_done)  # (the optimizer is ours: it goes with the step)
    with _phase_marks(model, tracker, saved, end), tracker, saved:
        step.forward_backward(model, [xy], device, precision, state.scaler)
        backward_done()
        step.optimizer_step(state, train_cfg.grad_clip)
    if "grads" not in end:
        raise RuntimeError(
            "the GradScaler skipped this step (inf or NaN gradients), so AdamW never ran: "
            "nothing to measure; try another seed"
        )
    cuda_peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None

    grads, state_storages = end["grads"], end["state"]
    param_shapes = {tuple(p.shape) for p in all_params}

    def category(rec: dict) -> str:
        if rec["weight_copy"]:
            return "weight_copies"
        if (rec["died"] is None and rec["ptr"] in grads) or rec["index"] in end["grads_made"]:
            return "gradients"
        if rec["died"] is None and rec["ptr"] in state_storages:
            return "optimizer"
        if rec["phase"] == "optimizer":
            return "optimizer_step"
        if rec["index"] in end["alive"]:  # alive when the model's forward returned
            return "logits" if rec["ptr"] in end["outputs"] else "activations"
        if (
            rec["phase"] != "backward: blocks"
            and rec["shape"][-1:] == (model_cfg.vocab_size,)
            and (rec["shape"] not in param_shapes)
        ):
            return "logits"  # the upcast in the forward, the (N, V) gradients in the backward
        return "activation_grads"  # gradients in flight, recomputed blocks, partial weight grads, scratch

    maxima, phase_max = tracker.timeline(category)
    kept, hooked = _kept_for_backward(tracker, end)
    new_state = sum(n for ptr, n in state_storages.items() if ptr not in existing)  # made by this (first) step
    step_moments = {
        name: sum(existing.values()) + n + (new_state if name != "optimizer" else 0) for name, n in phase_max.items()
    }
    return MemoryBreakdown(
        weights=sum(_storages(all_params, kind).values()),
        gradients=sum(grads.values()),
        optimizer=sum(end["moments"].values()),
        activations=sum(kept.values()),
        logits=maxima.get("logits", 0),
        activation_grads=maxima.get("activation_grads", 0),
        weight_copies=maxima.get("weight_copies", 0),
        optimizer_step=maxima.get("optimizer_step", 0),
        moments=step_moments,
        device_peak=cuda_peak if cuda_peak is not None else max(step_moments.values()),
        saved_by_hooks=sum(hooked.values()),
    )
