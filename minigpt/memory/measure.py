"""Measure the memory of one real training step: the step minigpt.step builds and runs, metered.

measure() builds the step with step.build_step_state, runs step.forward_backward then step.optimizer_step
(what step.train_step does), and counts the terms of MemoryBreakdown on the real tensors with two meters:
SavedTensorMeter (saved_tensors_hooks: what autograd saves) and LiveTensorTracker (a TorchDispatchMode
that sees every op: what is alive, op by op). Hooks tell the meters where the step is: module hooks in the
forward and the backward, the gap between forward_backward and optimizer_step for the end of backward, and
an optimizer step post-hook for the end of AdamW's step, before optimizer_step frees the gradients.
The moments and the peak come from the same step run once more under AllocatorMeter alone: a dispatch
mode changes how autograd sums gradients, and it cannot see scratch made inside an op (meters.py).

The meters are in meters.py; memory_snapshot() and memory_timeline() (pictures.py) record the same steps.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import replace

import torch

from minigpt import step
from minigpt.config import TrainConfig
from minigpt.loss import check_loss_chunks
from minigpt.memory.breakdown import MemoryBreakdown, check_shape
from minigpt.memory.meters import AllocatorMeter, LiveTensorTracker, SavedTensorMeter
from minigpt.model import GPT, ModelConfig
from minigpt.optim.adamw8bit import QUANTIZED_KEYS
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
    *,
    optimizer: str = "adamw",
    optimizer_in_backward: bool = False,
    loss_chunks: int = 1,
    offload_activations: bool = False,
    **lora: object,
) -> tuple[step.StepState, TrainConfig, tuple]:
    """Check the arguments; build the step with minigpt.step.build_step_state; make one batch of tokens.

    The TrainConfig carries the step's settings and train's default hyperparameters (its preset and ctx
    are not used: the model is `cfg`).
    """
    check_shape(cfg, batch, ctx)
    train_cfg = TrainConfig(precision=precision, checkpointing=checkpointing, master_weights=master_weights, seed=seed)
    if optimizer != "adamw" or optimizer_in_backward:  # the step in backward cannot clip by the global norm
        grad_clip = 0.0 if optimizer_in_backward else train_cfg.grad_clip
        levers = dict(optimizer=optimizer, optimizer_in_backward=optimizer_in_backward)
        train_cfg = replace(train_cfg, **levers, grad_clip=grad_clip)
    check_loss_chunks(loss_chunks, batch * ctx)  # (set after: TrainConfig checks it against its own ctx)
    train_cfg.loss_chunks, train_cfg.offload_activations = loss_chunks, offload_activations
    if lora.get("lora_rank"):  # adapters on a frozen base: the LoRA settings of measure() (TrainConfig's names)
        train_cfg = replace(train_cfg, **lora)
    check_precision(device, precision)  # refuses a precision this device would silently ignore
    torch.manual_seed(seed)  # dropout masks, seeded as train() seeds them
    state = step.build_step_state(cfg, train_cfg, device)
    state.model.train()
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1), generator=gen)
    xy = (tokens[:, :-1].clone().to(device), tokens[:, 1:].clone().to(device))  # two tensors, as loaders give
    return state, train_cfg, xy


# The optimizer state's tensors that hold the moments: AdamW's fp32 ones, or AdamW8bit's codes and scales
MOMENT_KEYS = ("exp_avg", "exp_avg_sq", *QUANTIZED_KEYS)


def _adamw_state(optimizer: torch.optim.Optimizer, keys: tuple[str, ...] | None = None):
    """AdamW's state tensors (`keys` of each parameter's state, or all of them: moments and step counters)."""
    state = optimizer.state.values()
    return (v for s in state for k, v in s.items() if torch.is_tensor(v) and (keys is None or k in keys))


def _storages(tensors, device_type: str) -> dict[int, int]:
    """{storage address: bytes} of the tensors on that type of device, each storage once."""
    return {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in tensors
        if t is not None and t.device.type == device_type
    }


@contextlib.contextmanager
def _phase_hooks(model: GPT, enter, forward_end=None):
    """Hooks that call enter(phase) where backward's phases begin: the loss head (the model's forward has
    returned; forward_end(output) is called first), the blocks and the embedding (the gradient reaches the
    final norm's output, then the embedding's: backward has got past them)."""

    def on_grad(name):
        def hook(module, args, output):
            if output.requires_grad:  # a frozen embedding (LoRA) has no backward of its own
                output.register_hook(lambda *_: enter(name))

        return hook

    def end_of_forward(module, args, output):
        if forward_end is not None:
            forward_end(output)
        enter("backward: loss head")

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


def _phase_marks(model: GPT, tracker: LiveTensorTracker, saved: SavedTensorMeter, end: dict):
    """_phase_hooks for the tensor meters; at the end of the forward, what is alive and what was saved."""

    def forward_end(output):
        end.update(
            alive=tracker.live_records(),
            saved=saved.alive(),
            outputs={t.untyped_storage().data_ptr() for t in output if t is not None},
        )
        saved.enabled = False  # what the loop saves after the model (GradScaler's scale) is not activations

    return _phase_hooks(model, tracker.set_phase, forward_end)


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


def _allocated_moments(
    state: step.StepState, all_params: list, grad_clip: float, xy, device: torch.device, precision: str
):
    """The same step once more with no meter that changes it: ({moment: allocated bytes}, peak), or None.

    It runs after the metered step, so AdamW's state exists from the start (as in every later step).
    None where this torch build records no allocations on this device.
    """
    meter, model = AllocatorMeter(device), state.model
    if not meter.available:
        return None
    if state.in_backward:
        state.in_backward.watch = None
    if device.type == "cuda":  # the allocator's own count, cuBLAS's workspaces included
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = sum(_storages([*all_params, *model.buffers(), *xy, *_adamw_state(state.optimizer)], "cpu").values())
    stop = None
    if not state.in_backward:  # as measure(): counted up to the end of AdamW's step, before the gradients go
        stop = state.optimizer.register_step_post_hook(lambda *_: meter.mark(None))
    offload = step.new_offloader(state, device)
    try:
        with offload or contextlib.nullcontext(), _phase_hooks(model, meter.mark), meter:
            meter.mark("forward")
            step.forward_backward(model, [xy], device, precision, state.scaler, offload)
            meter.mark("optimizer")
            step.optimizer_step(state, grad_clip)
            meter.mark(None)
    finally:
        if stop is not None:
            stop.remove()
    moments = meter.phase_peaks(before)
    if not moments:
        return None
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else max(moments.values())
    return moments, peak


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
    *,
    optimizer: str = "adamw",
    optimizer_in_backward: bool = False,
    loss_chunks: int = 1,
    offload_activations: bool = False,
    lora_rank: int | None = None,
    lora_targets: str = "attn",
    base_dtype: str = "fp32",
    quant_block: int = 64,
    train_norms: bool = False,
    train_embedding: bool = False,
) -> MemoryBreakdown:
    """Run one real training step (train's forward, backward, clipping, AdamW) and count its memory by kind.

    Measured: weights, gradients, optimizer (the real tensors, each storage once); activations (what
    saved_tensors_hooks sees in the forward, plus what is still alive at its end, such as selective
    checkpointing's cache); each transient term (the largest live bytes of its kind, op by op, from a
    LiveTensorTracker). The moments: the allocator's bytes at the worst point of each phase, over the same
    step run again with no dispatch mode (AllocatorMeter), when AdamW's state exists from the start, as in
    every later step. device_peak: on CUDA, torch.cuda.max_memory_allocated over that step (it also counts
    what libraries allocate through PyTorch, such as cuBLAS's workspace); elsewhere the largest moment.
    With optimizer_in_backward the optimizer steps inside backward, once per parameter: gradients is then
    the most gradient bytes alive at once, and the step's temporaries count as optimizer_step wherever they
    are made. A warm-up step comes first there too, so that the state exists before the metered step.
    With offload_activations, `offloaded` is what sat in host memory or the temp file at most, and the
    offloader, whose hooks replace the meter's, says what stayed on the device; what backward reads back
    counts in the moments (not as a transient term).
    """
    precision, device = normalize_precision(precision), torch.device(device)
    levers = dict(optimizer=optimizer, optimizer_in_backward=optimizer_in_backward)
    levers.update(loss_chunks=loss_chunks, offload_activations=offload_activations)
    levers.update(lora_rank=lora_rank, lora_targets=lora_targets, base_dtype=base_dtype, quant_block=quant_block)
    levers.update(train_norms=train_norms, train_embedding=train_embedding)
    shape = (model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed)
    state, train_cfg, xy = prepare_step(*shape, **levers)
    model, optimizer, in_backward = state.model, state.optimizer, state.in_backward
    if device.type == "cuda" or in_backward or levers["optimizer"] != "adamw":  # a warm-up step: the measured one
        # starts with all the state (AdamW8bit's update of its first tensors would see no state of the later ones)
        step.train_step(state, [xy], device, precision, train_cfg.grad_clip)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)

    all_params, kind = list(model.parameters()) + (state.master.params if state.master else []), device.type
    existing = _storages([*all_params, *model.buffers(), *xy, *_adamw_state(optimizer)], kind)
    tracker, saved, end = LiveTensorTracker(all_params, kind), SavedTensorMeter(model), {}

    def note_grads(grads) -> None:  # the records of these gradients count as gradients, whenever they die
        made = {g.untyped_storage().data_ptr() for g in grads if g is not None}
        end["grads_made"] |= {i for i in tracker.live_records() if tracker.records[i]["ptr"] in made}

    def backward_done() -> None:  # bf16-pure + master: backward's bf16 grads become fp32 ones next
        note_grads(p.grad for p in model.parameters())
        tracker.set_phase("optimizer")

    step_ops: list[list[int]] = []  # [first, last] op of each optimizer.step(): what it makes is optimizer_step

    def adamw_done(*_) -> None:  # AdamW has stepped: optimizer_step frees the gradients next, so look now
        step_ops[-1].append(tracker.clock)
        if in_backward and not end.get("finished"):  # one parameter stepped inside backward: its gradient
            note_grads(p.grad for p in state.train_params)
            return
        end["grads"] = _storages((p.grad for p in state.train_params), kind)
        end["state"] = _storages(_adamw_state(optimizer), kind)
        end["moments"] = _storages(_adamw_state(optimizer, MOMENT_KEYS), kind)
        tracker.stop()  # the rest of optimizer_step (scaler update, schedule, zero_grad) is not metered

    end["grads_made"] = set()
    optimizer.register_step_pre_hook(lambda *_: step_ops.append([tracker.clock]))  # (the optimizer goes with
    optimizer.register_step_post_hook(adamw_done)  # the step: its hooks need no removing)
    if in_backward:  # each hook shows its parameter's gradient before it frees it (a bf16 one, with master)
        in_backward.watch = lambda grad: note_grads([grad])
    offload, reloads, moved = step.new_offloader(state, device), set(), set()
    if offload is not None:  # what it writes out and what backward reads back count as activations
        offload.on_load = lambda storage: reloads.add((storage.data_ptr(), tracker.clock))  # (address, op)
        offload.on_store = lambda storage: moved.add(id(tracker.record_of(storage)))
    with offload or contextlib.nullcontext(), _phase_marks(model, tracker, offload or saved, end), tracker, saved:
        step.forward_backward(model, [xy], device, precision, state.scaler, offload)
        backward_done()
        step.optimizer_step(state, train_cfg.grad_clip)
        if in_backward:  # every parameter was stepped in backward: nothing left to free
            end["finished"] = True
            step_ops.append([tracker.clock])
            adamw_done()
    if "grads" not in end:
        raise RuntimeError(
            "the GradScaler skipped this step (inf or NaN gradients), so AdamW never ran: "
            "nothing to measure; try another seed"
        )
    grads, state_storages = end["grads"], end["state"]
    param_shapes = {tuple(p.shape) for p in all_params}

    def category(rec: dict) -> str:
        in_step = any(first < rec["born"] <= last for first, last in step_ops)  # AdamW8bit's fp32 copies of bf16
        if rec["weight_copy"] and not in_step:  # weights are its temporaries, not autocast's weight copies
            return "weight_copies"
        if (rec["died"] is None and rec["ptr"] in grads) or rec["index"] in end["grads_made"]:
            return "gradients"
        if rec["died"] is None and rec["ptr"] in state_storages:
            return "optimizer"
        if rec["phase"] == "optimizer" or in_step:
            return "optimizer_step"
        if rec["index"] in end["alive"]:  # alive when the model's forward returned
            return "logits" if rec["ptr"] in end["outputs"] else "activations"
        if (rec["ptr"], rec["born"]) in reloads or id(rec) in moved:  # an activation that left the device, or
            return "activations"  # came back for backward
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
    allocated = _allocated_moments(state, all_params, train_cfg.grad_clip, xy, device, precision)
    if allocated is None:
        warnings.warn(
            f"torch.profiler records no allocations on {device.type} here: the moments are the live-tensor "
            "meter's, which can count a summed gradient twice and misses scratch made inside an op",
            stacklevel=2,
        )
        allocated = step_moments, max(step_moments.values())
    return MemoryBreakdown(
        weights=sum(_storages(all_params, kind).values()),
        gradients=maxima.get("gradients", 0) if in_backward else sum(grads.values()),  # in backward: most at once
        optimizer=sum(end["moments"].values()),
        activations=sum(kept.values()),
        logits=maxima.get("logits", 0),
        activation_grads=maxima.get("activation_grads", 0),
        weight_copies=maxima.get("weight_copies", 0),
        optimizer_step=maxima.get("optimizer_step", 0),
        moments=allocated[0],
        device_peak=allocated[1],
        saved_by_hooks=sum(hooked.values()),
        offloaded=offload.peak_offloaded_bytes if offload is not None else None,
    )
