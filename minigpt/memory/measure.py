"""Measure the memory of one real training step: the step minigpt.train builds and runs, metered.

measure() builds the step with train.build_step_state, runs train.forward_backward then train.optimizer_step
(what train.train_step does), and counts the terms of MemoryBreakdown on the real tensors with two meters:
SavedTensorMeter (saved_tensors_hooks: what autograd saves) and LiveTensorTracker (a TorchDispatchMode
that sees every op: what is alive, op by op). Hooks tell the meters where the step is: module hooks in the
forward and the backward, the gap between forward_backward and optimizer_step for the end of backward, and
an optimizer step post-hook for the end of AdamW's step, before optimizer_step frees the gradients.

memory_snapshot() and memory_timeline() record the same training steps for PyTorch's own viewers.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from minigpt import train
from minigpt.memory.estimate import MemoryBreakdown, check_shape
from minigpt.model import GPT, ModelConfig
from minigpt.precision import autocast_context, check_precision, normalize_precision

# ----------------------------------------------------------------------------------------------------------
# 1. The meters


class SavedTensorMeter(torch.autograd.graph.saved_tensors_hooks):
    """Records the storages autograd saves for backward, each once (views share a storage).

    Parameters and buffers are left out (they exist anyway). It also sees the inputs that non-reentrant
    checkpointing keeps (checkpoint saves them under the hooks active outside it), but not what
    selective checkpointing caches: that policy keeps op outputs in a dict, not through autograd.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
        self._saved: dict[int, tuple[StorageWeakRef, int]] = {}  # storage address -> (weak ref, bytes)
        self.enabled = True

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if self.enabled and ptr not in skip and (ptr not in self._saved or self._saved[ptr][0].expired()):
                self._saved[ptr] = (StorageWeakRef(storage), storage.nbytes())
            # The meter only looks. A detached alias of the same storage, not t itself: when t is the
            # op's own output (exp, softmax), keeping t would tie the graph into a reference cycle that
            # is never freed unless backward runs (a forward-only measurement would leak its graph).
            return t.detach()

        super().__init__(pack, lambda t: t)

    def alive(self) -> dict[int, int]:
        """{address: bytes} of the saved storages still alive (a saved tensor can die with its graph)."""
        return {ptr: n for ptr, (ref, n) in self._saved.items() if not ref.expired()}


def _tensors(x):
    """The tensors in an op's arguments or results (nested tuples, lists and dicts)."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for item in x:
            yield from _tensors(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from _tensors(item)


class LiveTensorTracker(TorchDispatchMode):
    """Sees every op, and records each new storage it makes: bytes, when born, when freed, in which phase.

    "clock" counts ops. A storage's death is noticed through a weak reference, checked whenever an op
    makes a new storage (only then can memory grow). Tensors made before the tracker starts (weights,
    the batch) are not in it; views and in-place results are not new storages. After stop(), the
    records stay as they were: what was alive then counts as alive at the end.
    """

    def __init__(self, params: list[torch.Tensor], device_type: str) -> None:
        super().__init__()
        self.device_type = device_type  # storages elsewhere (AdamW's step counters on the host) are left out
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        self.clock = 0
        self.phases: list[tuple[int, str]] = [(1, "forward")]  # (first op of the phase, its name)
        self.records: list[dict] = []
        self._live: dict[int, tuple[StorageWeakRef, dict]] = {}
        self.stopped = False

    @property
    def phase(self) -> str:
        return self.phases[-1][1]

    def set_phase(self, name: str) -> None:
        if name != self.phase:
            self.sweep(died=self.clock + 1)
            self.phases.append((self.clock + 1, name))

    def live_records(self) -> set[int]:
        """Indices (in self.records) of the storages alive now."""
        self.sweep(died=self.clock + 1)
        return {rec["index"] for _, rec in self._live.values()}

    def stop(self) -> None:
        """The end of the metered step: note what has been freed, then record nothing more."""
        self.sweep(died=self.clock + 1)
        self.stopped = True

    def sweep(self, died: int) -> None:
        """Mark the storages freed since the last sweep as gone before op number `died`."""
        if self.stopped:
            return
        expired = torch.UntypedStorage._expired  # what StorageWeakRef.expired() calls, minus two wrappers
        for ptr in [p for p, (ref, _) in self._live.items() if expired(ref.cdata)]:
            self._live.pop(ptr)[1]["died"] = died

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.stopped:
            return func(*args, **(kwargs or {}))
        self.clock += 1
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        new = [
            t
            for t in _tensors(out)
            if t.device.type == self.device_type
            and t.untyped_storage().nbytes()
            and t.untyped_storage().data_ptr() not in inputs
        ]  # not a view or in-place result of an input
        if not new:
            return out
        # Memory only grows when an op makes a storage: that is when to look for what was freed before it.
        self.sweep(died=self.clock)
        for t in new:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in self._live:
                continue  # a second view of a storage this op already made
            rec = {
                "index": len(self.records),
                "ptr": ptr,
                "bytes": storage.nbytes(),
                "shape": tuple(t.shape),
                "born": self.clock,
                "died": None,
                "phase": self.phase,
                # autocast's copy of a weight: a cast whose input is a parameter
                "weight_copy": func is torch.ops.aten._to_copy.default and bool(inputs & self.param_ptrs),
            }
            self.records.append(rec)
            self._live[ptr] = (StorageWeakRef(storage), rec)
        return out

    def timeline(self, category_of) -> tuple[dict[str, int], dict[str, int]]:
        """Largest live bytes of each category, and of all tracked storages in each phase, over the step."""
        self.sweep(died=self.clock + 1)
        births, deaths = {}, {}
        for rec in self.records:
            births.setdefault(rec["born"], []).append(rec)
            if rec["died"] is not None:
                deaths.setdefault(rec["died"], []).append(rec)
        phase_starts = dict(self.phases)
        live, maxima, phase_max, total, phase = {}, {}, {}, 0, "forward"
        for clock in range(1, self.clock + 1):
            phase = phase_starts.get(clock, phase)
            events = [(r, -1) for r in deaths.get(clock, [])] + [(r, 1) for r in births.get(clock, [])]
            for rec, sign in events:  # frees before this op, then what this op made
                cat = category_of(rec)
                live[cat] = live.get(cat, 0) + sign * rec["bytes"]
                maxima[cat] = max(maxima.get(cat, 0), live[cat])
                total += sign * rec["bytes"]
            phase_max[phase] = max(phase_max.get(phase, 0), total)
        return maxima, phase_max


# ----------------------------------------------------------------------------------------------------------
# 2. measure(): one real training step, metered


def _prepare(
    cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str,
    checkpointing: str,
    master_weights: bool,
    device: torch.device,
    seed: int,
) -> tuple[train.StepState, train.TrainConfig, tuple]:
    """Check the arguments; build the step with train's own build_step_state; make one batch of tokens.

    The TrainConfig carries the step's settings and train's default hyperparameters (its preset and ctx
    are not used: the model is `cfg`).
    """
    check_shape(cfg, batch, ctx)
    train_cfg = train.TrainConfig(
        precision=precision, checkpointing=checkpointing, master_weights=master_weights, seed=seed
    )
    check_precision(device, precision)  # refuses a precision this device would silently ignore
    torch.manual_seed(seed)  # dropout masks, seeded as train() seeds them
    state = train.build_step_state(cfg, train_cfg, device)
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
    state, _, (x, y) = _prepare(model_cfg, batch, ctx, precision, checkpointing, False, device, seed)
    model = state.model
    tracker, saved = LiveTensorTracker(list(model.parameters()), device.type), SavedTensorMeter(model)
    end: dict = {}
    with _phase_marks(model, tracker, saved, end), tracker, saved, autocast_context(device, precision):
        model(x, y, reduction="sum")  # as train.forward_backward calls it
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
    state, train_cfg, xy = _prepare(model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed)
    model, optimizer = state.model, state.optimizer
    if device.type == "cuda":  # a warm-up step, so the measured one starts with AdamW's state allocated
        train.train_step(state, [xy], device, precision, train_cfg.grad_clip)
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
        train.forward_backward(model, [xy], device, precision, state.scaler)
        backward_done()
        train.optimizer_step(state, train_cfg.grad_clip)
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


# ----------------------------------------------------------------------------------------------------------
# 3. Pictures of a step: a CUDA memory snapshot, or a profiler memory timeline


def _run_steps(
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str,
    checkpointing: str,
    master_weights: bool,
    device: torch.device,
    seed: int,
    steps: int,
    record,
) -> None:
    """Build the step as train() does and run `steps` of train's training steps inside the context `record`."""
    precision = normalize_precision(precision)
    state, train_cfg, xy = _prepare(model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed)
    with record:
        for _ in range(steps):
            train.train_step(state, [xy], device, precision, train_cfg.grad_clip)


def memory_snapshot(
    path: str | Path,
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    master_weights: bool = False,
    device: torch.device | str = "cuda",
    seed: int = 0,
    steps: int = 2,
) -> Path:
    """Record every CUDA allocation of `steps` training steps into a snapshot file (a pickle).

    Drag the file onto https://pytorch.org/memory_viz to see each tensor's lifetime and the stack that
    made it. The first step also creates AdamW's state; the second is what every later step looks like.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            f"memory_snapshot records the CUDA allocator, and {device} is not a CUDA device "
            "(or this torch has no CUDA); on a CPU use memory_timeline() instead"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)  # from here on, every alloc and free
    try:
        _run_steps(
            model_cfg,
            batch,
            ctx,
            precision,
            checkpointing,
            master_weights,
            device,
            seed,
            steps,
            contextlib.nullcontext(),
        )
        torch.cuda.synchronize(device)
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)  # stop recording
    return path


TIMELINE_SUFFIXES = (".html", ".json", ".json.gz")


def memory_timeline(
    path: str | Path,
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    master_weights: bool = False,
    device: torch.device | str = "cpu",
    seed: int = 0,
    steps: int = 2,
) -> Path | None:
    """Profile `steps` training steps and export torch.profiler's memory timeline, on any device.

    .html: a stacked plot of memory by category (parameters, optimizer state, activations, gradients,
    temporaries...); .json / .json.gz: the plot's points. Returns None, with a warning saying why,
    where this torch build cannot profile memory.
    """
    path = Path(path)
    if not path.name.endswith(TIMELINE_SUFFIXES):
        raise ValueError(
            f"{path.name}: the timeline is written as {', '.join(TIMELINE_SUFFIXES)}; "
            "choose a file name with one of these endings"
        )
    device = torch.device(device)
    if not torch.autograd.kineto_available():
        warnings.warn(
            f"this torch build ({torch.__version__}) has no Kineto profiler: no memory timeline", stacklevel=2
        )
        return None
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    # The memory timeline needs all three: allocations, the shapes of op inputs, and Python stacks.
    profiler = torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=True, with_stack=True)
    _run_steps(model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed, steps, profiler)
    path.parent.mkdir(parents=True, exist_ok=True)
    where = f"cuda:{device.index or 0}" if device.type == "cuda" else device.type
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of CUDA snapshots
            profiler.export_memory_timeline(str(path), device=where)
    except Exception as error:  # noqa: BLE001 - any failure here means "this build cannot draw it"
        warnings.warn(
            f"torch {torch.__version__} could not export a memory timeline for {where}: "
            f"{type(error).__name__}: {error}",
            stacklevel=2,
        )
        return None
    return path
