"""The training loop, with every memory lever: precision, GradScaler, accumulation, checkpointing.

One optimizer step ("a window") is:
  1. forward + backward on `accum` micro-batches, each loss divided by the number of target tokens in
     the WHOLE window, so the summed gradients equal those of one big batch;
  2. (fp16) unscale the gradients, then clip their norm, then step AdamW; a step the GradScaler skips
     because of inf/NaN gradients does not advance the learning-rate schedule;
  3. zero the gradients (set_to_none frees their memory until the next backward).
Under torchrun each process takes its own slice of the window's micro-batches and DistributedDataParallel
averages the gradients, syncing only on the last micro-batch (no_sync before the others). --shard zero1
splits AdamW's moments over the processes, --shard fsdp also the weights and gradients (minigpt.distributed);
checkpoints hold the whole state either way, so a run can resume with another --shard or number of processes.

A run never loses work: Ctrl-C (or SIGTERM) stops it after the current step and saves a checkpoint,
a NaN or inf loss stops it without saving the ruined weights, and a new run never overwrites a saved one.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn as nn

from minigpt import distributed as dist_utils
from minigpt.data import TokenData, load_tokens
from minigpt.device import pick_device
from minigpt.model import GPT, IGNORE_INDEX, PRESETS, ModelConfig, get_config
from minigpt.precision import autocast_context, check_precision, normalize_precision
from minigpt.recompute import CHECKPOINTING_MODES
from minigpt.run_state import RunFolder, StopSignals
from minigpt.tokenizer import DEFAULT_TOKENIZER, get_tokenizer


@dataclass
class TrainConfig:
    """Everything a run needs. The CLI, notebooks and tests all build one of these and call train()."""

    preset: str = "10m"
    precision: str = "fp32"  # fp32 | bf16 | fp16 | bf16-pure (aliases: float32 | bfloat16 | float16)
    master_weights: bool = False  # bf16-pure only: keep fp32 master weights and optimizer state
    batch: int = 8  # micro-batch: sequences per forward/backward
    accum: int = 1  # micro-batches per optimizer step
    ctx: int | None = None  # tokens per sequence (default: the preset's maximum)
    checkpointing: str = "none"  # none | full | sqrt | selective
    compile: bool = False  # torch.compile the model: faster steps, fewer saved activations; the first step compiles
    shard: str = "none"  # none | zero1 | fsdp: what is split over the processes under torchrun (minigpt.distributed)
    dropout: float = 0.0
    steps: int = 100  # optimizer steps in total (a resumed run continues up to this number)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int | None = None  # default: 5% of steps
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # max grad norm; 0 disables clipping
    eval_every: int = 0  # steps between val-loss evaluations (0: only at the end)
    eval_batches: int = 8
    save_every: int = 0  # steps between checkpoints (0: only at the end); needs `out`
    seed: int = 0
    corpus: str | None = None  # a UTF-8 text file; None: the built-in stories
    tokenizer: str = DEFAULT_TOKENIZER
    out: str | None = None  # run folder: checkpoint.pt and log.jsonl
    resume: bool = False
    device: str = "auto"
    sample_tokens: int = 60  # tokens generated at the end (0: none)
    progress: bool | None = None  # tqdm bar; None: in a terminal or a notebook, else a log line now and then
    verbose: bool = True

    def __post_init__(self) -> None:
        self.precision = normalize_precision(self.precision)
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of: {', '.join(PRESETS)}")
        if self.checkpointing not in CHECKPOINTING_MODES:
            raise ValueError(
                f"unknown checkpointing {self.checkpointing!r}; choose one of: {', '.join(CHECKPOINTING_MODES)}"
            )
        max_ctx = PRESETS[self.preset].ctx
        self.ctx = max_ctx if self.ctx is None else self.ctx
        for name in ("batch", "accum", "ctx", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        for name in ("eval_every", "save_every", "sample_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(self, name)}")
        if self.eval_batches < 1:
            raise ValueError(f"eval_batches must be at least 1, got {self.eval_batches}")
        if not (math.isfinite(self.lr) and self.lr > 0):  # "not (... > 0)" also catches nan
            raise ValueError(f"--lr must be positive, got {self.lr}")
        if not (math.isfinite(self.grad_clip) and self.grad_clip >= 0):
            raise ValueError(f"--grad-clip must be 0 (no clipping) or a positive max norm, got {self.grad_clip}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"--dropout must be in [0, 1), got {self.dropout}")
        if not 0 <= self.min_lr_ratio <= 1 or not self.weight_decay >= 0:
            raise ValueError(
                f"need 0 <= min_lr_ratio <= 1 and weight_decay >= 0, got {self.min_lr_ratio}, {self.weight_decay}"
            )
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must be in [0, 1), got {self.betas}")
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"--seed must be between 0 and 2**64 - 1, got {self.seed}")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"--warmup-steps must be between 0 and --steps ({self.steps}), got {self.warmup_steps}")
        if self.ctx > max_ctx:
            raise ValueError(f"--ctx {self.ctx} is above the {self.preset} preset's maximum of {max_ctx}")
        dist_utils.check_shard_mode(self.shard)
        if self.master_weights and self.precision != "bf16-pure":
            raise ValueError("master_weights only applies to --precision bf16-pure (the others keep fp32 weights)")
        if (self.save_every or self.resume) and not self.out:
            raise ValueError("--resume and --save-every need --out, the run folder that holds checkpoint.pt")
        self.betas = tuple(self.betas)

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 20)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning-rate multiplier after `step` optimizer steps: linear warmup, then cosine decay."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


# Where torch (>= 2.4) has a fused AdamW kernel: an update with no temporary tensors. minigpt.memory's estimate
# relies on this list; fused_adamw_supported confirms it on the torch actually installed.
FUSED_ADAMW_DEVICES = ("cpu", "cuda")


@functools.cache
def fused_adamw_supported(device_type: str) -> bool:
    """Whether this torch has a fused AdamW kernel for the device type (CUDA, and the CPU since torch 2.4)."""
    try:
        p = nn.Parameter(torch.zeros(1, device=device_type))
        p.grad = torch.zeros_like(p)
        torch.optim.AdamW([p], fused=True).step()
        return True
    except (RuntimeError, TypeError):  # "fused=True requires all the params to be ..." where there is no kernel
        return False


def check_compile(device: torch.device) -> None:
    """Raise ValueError where torch.compile cannot work: no C++ compiler for CPU kernels, or an Apple GPU."""
    if device.type == "mps":
        raise ValueError("--compile: torch.compile for Apple GPUs (mps) is a prototype in PyTorch; train without it")
    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++", "cl")):
        raise ValueError(
            "--compile on the CPU needs a C++ compiler on the PATH (g++ or clang++; on Windows, MSVC's cl): "
            "install one, or train without --compile"
        )


def make_optimizer(params: list[nn.Parameter], cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (and the embedding) only, not on norm gains.

    Fused where the device has the kernel: one pass over each parameter and its two moments, no temporary
    tensors; elsewhere foreach, which batches the update over all parameters.
    """
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = fused_adamw_supported(params[0].device.type)
    if cfg.precision == "fp16" and cfg.shard == "fsdp" and dist_utils.world_size() > 1:
        fused = False  # the fused kernel rejects ShardedGradScaler's inf flag (dist_utils.FSDP_FP16_FUSED_ERROR)
    settings = dict(lr=cfg.lr, betas=cfg.betas, fused=fused or None, foreach=not fused or None)
    if cfg.shard == "zero1" and dist_utils.world_size() > 1:  # each process keeps the moments of its share only
        return dist_utils.zero1_optimizer(groups, torch.optim.AdamW, **settings)
    return torch.optim.AdamW(groups, **settings)


class MasterWeights:
    """fp32 copies of a bf16 model's parameters: the optimizer updates these, then they are rounded back.

    An update smaller than half a bf16 step would vanish if added to the bf16 weight directly; added
    to the fp32 copy it accumulates until it is large enough to show in bf16.
    """

    def __init__(self, model: nn.Module) -> None:
        self.pairs = [(p, p.detach().float().requires_grad_(True)) for p in model.parameters()]

    @property
    def params(self) -> list[torch.Tensor]:
        return [m for _, m in self.pairs]

    def grads_to_master(self) -> None:
        for p, m in self.pairs:
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None

    @torch.no_grad()
    def master_to_model(self) -> None:
        for p, m in self.pairs:
            p.copy_(m)


def forward_backward(
    model: nn.Module,
    micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    precision: str,
    scaler: torch.amp.GradScaler | None = None,
) -> torch.Tensor:
    """Accumulate the gradients of one window; return the window's mean loss per target token.

    Each micro-batch's summed loss is divided by the number of counted targets in the whole window
    (across all processes under DDP), not averaged per micro-batch: a mean of per-micro-batch means
    over-weights the tokens of short (padded) micro-batches. The loss comes back as a 0-dim tensor on
    `device`: float(loss) reads it, and on a GPU that waits until the queued work is done.
    """
    n_tokens = sum(int((y != IGNORE_INDEX).sum()) for _, y in micro_batches)
    n_tokens, world = dist_utils.sum_across_processes(n_tokens), dist_utils.world_size()
    if n_tokens == 0:
        raise ValueError("every target in this window is IGNORE_INDEX: nothing to learn from")
    summed_losses = []
    for i, (x, y) in enumerate(micro_batches):
        is_last = i == len(micro_batches) - 1
        # Under DDP or FSDP, skip the gradient all-reduce on every micro-batch but the last. no_sync must be
        # entered before the forward pass: DDP prepares its reduction hooks there.
        sync = contextlib.nullcontext() if is_last else dist_utils.no_gradient_sync(model)
        with sync:
            with autocast_context(device, precision):  # forward and loss only; backward follows by itself
                _, summed = model(x.to(device), y.to(device), reduction="sum")
            # DDP (and FSDP) average over processes, so multiply back by the world size to get a global sum.
            loss = summed * world / n_tokens
            (scaler.scale(loss) if scaler is not None else loss).backward()
        # Kept on the device: summed.item() here would make the CPU wait for the GPU every micro-batch.
        summed_losses.append(summed.detach())
    return dist_utils.sum_across_processes(torch.stack(summed_losses).sum()) / n_tokens


@dataclass
class StepState:
    """Everything an optimizer step touches: the model and what updates it."""

    model: GPT
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None  # fp16 only
    master: MasterWeights | None  # bf16-pure with master_weights only
    forward: nn.Module  # what runs the forward: the model, or torch.compile(model) (same parameters)

    @property
    def train_params(self) -> list[torch.Tensor]:
        """The tensors AdamW updates: the fp32 master copies if there are any, else the model's own."""
        return self.master.params if self.master else list(self.model.parameters())


def build_step_state(model_cfg: ModelConfig, cfg: TrainConfig, device: torch.device) -> StepState:
    """The model (seeded init, checkpointing mode, dtype for the precision) and its optimizer, schedule, scaler."""
    model = GPT(model_cfg, seed=cfg.seed).to(device)
    model.checkpointing = cfg.checkpointing
    if cfg.precision == "bf16-pure":
        model.to(torch.bfloat16)  # weights, and so gradients and AdamW state, all in bf16
    fsdp = cfg.shard == "fsdp" and dist_utils.world_size() > 1
    if fsdp:  # before the optimizer and the master copies: they must see the sharded parameters
        dist_utils.shard_model(model)
    master = MasterWeights(model) if cfg.master_weights else None
    optimizer = make_optimizer(master.params if master else list(model.parameters()), cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, cfg))
    scaler = None
    if cfg.precision == "fp16":  # under FSDP each process sees only its slice of the gradients: the scaler
        # must agree over all processes whether any slice overflowed, which ShardedGradScaler does
        scaler = dist_utils.sharded_grad_scaler(device.type) if fsdp else torch.amp.GradScaler(device.type)
    forward = torch.compile(model) if cfg.compile else model
    return StepState(model, optimizer, scheduler, scaler, master, forward)


def optimizer_step(state: StepState, grad_clip: float) -> tuple[torch.Tensor, float, float | None, bool]:
    """Unscale (fp16), clip, step AdamW, advance the schedule unless the step was skipped, zero the grads.

    Returns (grad norm before clipping as a 0-dim tensor on the device, lr used, loss scale used or None,
    whether the step was skipped).
    """
    optimizer, scaler = state.optimizer, state.scaler
    if state.master:
        state.master.grads_to_master()
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    clip = grad_clip if grad_clip > 0 else float("inf")
    grad_norm = dist_utils.full_tensor(torch.nn.utils.clip_grad_norm_(state.train_params, clip))  # FSDP: a DTensor
    lr = state.scheduler.get_last_lr()[0]
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
    micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    precision: str,
    grad_clip: float = 1.0,
    module: nn.Module | None = None,
) -> dict:
    """One optimizer step on one window of micro-batches: forward_backward, then optimizer_step.

    `module` is what runs the forward: the DDP wrapper under torchrun (default: state.forward, the model or its
    compiled version).
    """
    loss = forward_backward(state.forward if module is None else module, micro_batches, device, precision, state.scaler)
    grad_norm, lr, scale, skipped = optimizer_step(state, grad_clip)
    # Read loss and grad norm only now, with the whole step queued: each read waits for the GPU to catch up,
    # and a wait in mid-step leaves the GPU idle while the CPU queues the rest (fp16's scaler still waits).
    return {"loss": loss.item(), "lr": lr, "grad_norm": grad_norm.item(), "scale": scale, "skipped": skipped}


@dataclass
class TrainResult:
    """What a run produced: the trained model, the per-step history and a summary."""

    config: TrainConfig
    model: GPT
    history: list[dict] = field(default_factory=list)  # one record per optimizer step
    val_history: list[tuple[int, float]] = field(default_factory=list)  # (step, val loss)
    sample: str = ""
    effective_batch: int = 0
    interrupted: str | None = None  # "SIGINT" or "SIGTERM" if a signal stopped the run before its last step
    already_finished: bool = False  # resumed a run that had already done all its steps: nothing trained

    @property
    def losses(self) -> list[float]:
        return [r["loss"] for r in self.history]

    @property
    def skipped_steps(self) -> int:
        return sum(r["skipped"] for r in self.history)

    def summary(self) -> dict:
        """The JSON `minigpt train --json` prints."""
        timed = [r["tokens_per_s"] for r in self.history[1:]] or [r["tokens_per_s"] for r in self.history]
        peaks = [r["peak_memory_bytes"] for r in self.history if r["peak_memory_bytes"] is not None]
        return {
            "config": asdict(self.config),
            "params": self.model.num_params(),
            "effective_batch": self.effective_batch,
            "steps": len(self.history) and self.history[-1]["step"],
            "final_train_loss": self.losses[-1] if self.history else None,
            "final_val_loss": self.val_history[-1][1] if self.val_history else None,
            "tokens_per_s": float(np.median(timed)) if timed else None,
            "skipped_steps": self.skipped_steps,
            "peak_memory_bytes": max(peaks) if peaks else None,
            "sample": self.sample,
        }


@torch.no_grad()
def estimate_loss(model: GPT, data: TokenData, cfg: TrainConfig, device: torch.device, split: str = "val") -> float:
    """Mean loss over `cfg.eval_batches` fixed batches (same batches every call, RNG untouched)."""
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(cfg.seed + 10_000)
    total, count = 0.0, 0
    for _ in range(cfg.eval_batches):
        x, y = data.get_batch(split, cfg.batch, cfg.ctx, gen)
        with autocast_context(device, cfg.precision):
            _, loss = model(x.to(device), y.to(device), reduction="sum")
        total, count = total + loss.item(), count + y.numel()
    model.train(was_training)
    return total / count


def _peak_memory(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    if device.type == "mps":
        return torch.mps.driver_allocated_memory()
    return None  # CPU: minigpt.memory measures saved tensors instead


def window_micro_batches(
    data: TokenData, cfg: TrainConfig, gen: torch.Generator, rank: int = 0, world: int = 1
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This process's micro-batches of the next window: `accum` pairs (x, y) of `batch` sequences each.

    Every process draws the same window of batch * accum * world sequences and takes its own slice, so the
    effective batch is the same sequences whatever the number of processes.
    """
    n_window = cfg.batch * cfg.accum
    x, y = data.get_batch("train", n_window * world, cfg.ctx, gen)
    x, y = x[rank * n_window : (rank + 1) * n_window], y[rank * n_window : (rank + 1) * n_window]
    return list(zip(x.split(cfg.batch), y.split(cfg.batch)))


class TrainingDiverged(RuntimeError):
    """The loss became NaN or inf: the weights are ruined, so the run stops without saving them."""

    def __init__(self, message: str, result: TrainResult) -> None:
        super().__init__(message)
        self.result = result  # the steps before the bad one (result.model holds the ruined weights)


def diverged_message(loss: float, step: int, cfg: TrainConfig, run: RunFolder | None) -> str:
    """What happened, what was kept, and what to check."""
    if run is None:
        kept = "nothing was saved (no --out)"
    elif run.saved_step is None:
        kept = f"nothing was saved in {run.path} yet"
    else:
        kept = f"the last good checkpoint (step {run.saved_step}) in {run.path} is kept"
    precision = (
        f"the precision (try fp32 to rule out {cfg.precision} rounding)"
        if cfg.precision != "fp32"
        else "the precision is fp32 already, so not rounding"
    )
    return (
        f"training diverged: the loss is {loss} at step {step} ({cfg.precision}, lr {cfg.lr:g}); {kept}. "
        f"Check the learning rate (a lower --lr, more --warmup-steps), the data (--corpus); {precision}"
    )


def _stop_requested(stop_signal: StopSignals, world: int) -> str | None:
    """The signal that stops this run after the current step; under torchrun, any process's (all stop together)."""
    if world == 1:
        return stop_signal.received
    anyone = dist_utils.sum_across_processes(float(stop_signal.received is not None)) > 0  # every process calls it
    return stop_signal.received or ("SIGTERM" if anyone else None)


def in_notebook_kernel() -> bool:
    """Whether this code runs inside a Jupyter (IPython) kernel, where tqdm.auto draws a widget bar.

    `!minigpt train` in a notebook is a child process with no kernel of its own: False there.
    """
    if "ipykernel" not in sys.modules:  # never imported: no kernel, and no need to import IPython to ask
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _progress_enabled(cfg: TrainConfig) -> bool:
    """A tqdm bar where someone watches it redraw: a terminal or a notebook; cfg.progress forces it on or off."""
    if cfg.progress is not None:
        return cfg.progress
    return sys.stderr.isatty() or in_notebook_kernel()


LOG_EVERY_STEPS = 10  # without a bar: one line per tenth of the run ...
LOG_EVERY_SECONDS = 10.0  # ... or after this many seconds, whichever comes first


class StepLog:
    """One line per step group where no bar can redraw (CI logs, pipes, `!minigpt train` in a notebook).

    A line every `total / every_fraction` steps or every `every_s` seconds, and always the last step.
    """

    def __init__(
        self,
        total: int,
        say: Callable[..., None],
        every_fraction: int = LOG_EVERY_STEPS,
        every_s: float = LOG_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        start: int = 0,
    ) -> None:
        self.total, self.say, self.every_s, self.clock = total, say, every_s, clock
        self.every_steps = max(1, total // every_fraction)
        self.last_step, self.last_time = start, clock()  # a resumed run counts from where it resumed

    def update(self, record: dict) -> None:
        """Print `step 40/200  loss 5.123  3,210 tokens/s` if enough steps or seconds have passed."""
        step, now = record["step"], self.clock()
        due = step - self.last_step >= self.every_steps or now - self.last_time >= self.every_s
        if not (due or step == self.total):
            return
        self.say(
            f"step {step}/{self.total}  loss {record['loss']:.3f}  {record['tokens_per_s']:,.0f} tokens/s", flush=True
        )
        self.last_step, self.last_time = step, now


def train(
    cfg: TrainConfig,
    data: TokenData | None = None,
    on_step: Callable[[dict], bool | None] | None = None,
) -> TrainResult:
    """Train a model as `cfg` says and return the result. `on_step(record)` returning True stops early.

    Ctrl-C (SIGINT, also a notebook's "interrupt kernel") or SIGTERM stops the run after the current step,
    saves a checkpoint if `cfg.out` is set, and returns what was trained with result.interrupted set.
    A NaN or inf loss raises TrainingDiverged, keeping the last good checkpoint.
    """
    from tqdm.auto import tqdm

    rank, world = dist_utils.setup(cfg.device)  # (0, 1) unless launched by torchrun
    device = pick_device(cfg.device if world == 1 else dist_utils.local_device(cfg.device))
    check_precision(device, cfg.precision)  # no silent no-op: fail now if this device can't do it
    if cfg.compile:
        check_compile(device)
    torch.manual_seed(cfg.seed)  # dropout's RNG
    say = print if (cfg.verbose and rank == 0) else (lambda *a, **k: None)
    if world == 1 and cfg.shard != "none":
        say(f"--shard {cfg.shard} with one process: nothing to split, so it trains as --shard none")
    sharded = world > 1 and cfg.shard != "none"  # some state is split: saving gathers it from every process
    fsdp = world > 1 and cfg.shard == "fsdp"  # every forward needs every process (they gather the weights)

    run = RunFolder(cfg.out) if cfg.out else None
    with contextlib.ExitStack() as held:  # what the run holds until it returns or fails: lock, log, bar
        if run and rank == 0:  # the run folder is checked and locked before any slow work
            run.check_usable()
            held.enter_context(run.locked())  # a second run on this folder stops here
        saved = run.load(cfg) if cfg.resume else None  # a checkpoint that does not fit cfg stops here
        if run and not cfg.resume and rank == 0:
            run.check_fresh()

        data = data or load_tokens(cfg.corpus, cfg.tokenizer)
        data.check_ctx(cfg.ctx)
        step_tokens = cfg.batch * cfg.accum * world * cfg.ctx
        if rank == 0 and step_tokens > len(data.train):  # runs, but hardly what anyone meant
            print(
                f"warning: one step takes {step_tokens:,} tokens (batch x accum x processes x ctx), more than the "
                f"corpus's {len(data.train):,} training tokens; a smaller --batch or --accum gives more steps",
                file=sys.stderr,
            )
        state = build_step_state(get_config(cfg.preset, dropout=cfg.dropout), cfg, device)
        model = state.model
        data_gen = torch.Generator().manual_seed(cfg.seed)

        result = TrainResult(cfg, model, effective_batch=cfg.batch * cfg.accum * world)
        start = 0
        if saved:
            start = run.restore(shard_checkpoint(saved, state), state, result, data_gen)
            dist_utils.steps_to_param_device(state.optimizer)
            if start == cfg.steps:
                say(f"{run.path} is already finished: {start} of {cfg.steps} steps; pass a larger --steps to go on")
                result.already_finished = True
                dist_utils.teardown()
                return result
            say(f"resumed from {run.checkpoint} at step {start}")

        def save() -> None:
            if not run:
                return
            whole = gather_checkpoint(state) if sharded else None  # every process takes part in the gathering
            if rank == 0:
                run.save(cfg, state, result, data_gen, whole)
            dist_utils.barrier()  # nobody goes on (or exits) before the checkpoint is written

        # DDP averages the gradients (also under zero1); FSDP's own hooks gather weights and reduce gradients
        ddp_model = dist_utils.wrap(state.forward, device) if world > 1 and not fsdp else state.forward
        say(
            f"effective batch = {cfg.batch} (micro-batch) x {cfg.accum} (accum) x {world} (processes) = "
            f"{result.effective_batch} sequences = {result.effective_batch * cfg.ctx:,} tokens per step"
        )
        log = held.enter_context(run.open_log(result.history)) if run and rank == 0 else None
        show_bar = _progress_enabled(cfg) and rank == 0
        bar = held.enter_context(tqdm(total=cfg.steps, initial=start, disable=not show_bar, desc="train"))
        step_log = StepLog(cfg.steps, say, start=start) if not show_bar else None  # say: verbose, rank 0 only
        model.train()
        with StopSignals() as stop_signal:  # Ctrl-C / SIGTERM: finish this step, save, stop
            for step in range(start, cfg.steps):
                t0 = time.perf_counter()
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                micro = window_micro_batches(data, cfg, data_gen, rank, world)
                record = {"step": step + 1, **train_step(state, micro, device, cfg.precision, cfg.grad_clip, ddp_model)}
                if not math.isfinite(record["loss"]) and not record["skipped"]:  # fp16's scaler skips such steps
                    raise TrainingDiverged(diverged_message(record["loss"], step + 1, cfg, run), result)
                record["tokens_per_s"] = result.effective_batch * cfg.ctx / (time.perf_counter() - t0)
                record["peak_memory_bytes"] = _peak_memory(device)
                is_last = step + 1 == cfg.steps
                evaluates = rank == 0 or fsdp  # under FSDP every process runs the forward with process 0
                if evaluates and ((cfg.eval_every and (step + 1) % cfg.eval_every == 0) or is_last):
                    record["val_loss"] = estimate_loss(model, data, cfg, device)
                    result.val_history.append((step + 1, record["val_loss"]))
                result.history.append(record)
                if log:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.3f}")
                if step_log:
                    step_log.update(record)
                stop = bool(on_step(record)) if on_step else False
                result.interrupted = None if is_last else _stop_requested(stop_signal, world)
                if is_last or stop or result.interrupted or (cfg.save_every and (step + 1) % cfg.save_every == 0):
                    save()
                if stop or result.interrupted:
                    break

    if fsdp:  # every process gets the whole trained model back, for sampling and for the caller
        result.model = unsharded_model(model, cfg, device)
    if cfg.sample_tokens and rank == 0 and not result.interrupted:
        result.sample = sample_text(result.model, cfg.tokenizer, cfg.sample_tokens, device, seed=cfg.seed)
    dist_utils.teardown()
    if result.history and not result.interrupted:
        s = result.summary()
        say(
            f"done: {s['steps']} steps, train loss {s['final_train_loss']:.3f}, val loss "
            f"{s['final_val_loss'] or float('nan'):.3f}, {s['tokens_per_s']:,.0f} tokens/s"
        )
    return result


def gather_checkpoint(state: StepState) -> dict:
    """The model, master copies and optimizer state, whole, as one process would save them (every process calls this).

    Process 0 gets everything; under zero1 the others get optimizer None (ZeroRedundancyOptimizer
    consolidates on process 0 only).
    """
    return {
        "model": dist_utils.full_model_state(state.model),
        "master": [dist_utils.full_tensor(m).cpu() for m in state.master.params] if state.master else None,
        "optimizer": dist_utils.full_optimizer_state(state.optimizer),
    }


def shard_checkpoint(saved: dict, state: StepState) -> dict:
    """A whole checkpoint cut the way this process's step state is (FSDP: each keeps its slices); else unchanged."""
    model_now = state.model.state_dict()
    params = [p for group in state.optimizer.param_groups for p in group["params"]]  # AdamW's order of indices
    cut = dict(saved)
    cut["model"] = {k: dist_utils.shard_like(v, model_now.get(k, v)) for k, v in saved["model"].items()}
    if state.master and saved["master"] is not None:
        cut["master"] = [dist_utils.shard_like(v, m) for v, m in zip(saved["master"], state.master.params)]
    cut["optimizer"] = dist_utils.shard_optimizer_state_like(saved["optimizer"], params)
    return cut


def unsharded_model(model: GPT, cfg: TrainConfig, device: torch.device) -> GPT:
    """A plain GPT holding the whole weights of an FSDP-sharded one (every process must call this)."""
    whole = GPT(model.cfg, seed=cfg.seed).to(device)
    if cfg.precision == "bf16-pure":
        whole.to(torch.bfloat16)
    whole.load_state_dict(dist_utils.full_model_state(model))
    return whole


def sample_text(
    model: GPT, tokenizer: str, n_tokens: int, device: torch.device, prompt: str = "", seed: int = 0
) -> str:
    """Generate `n_tokens` after `prompt` (or after <|endoftext|>) with temperature 0.8, top-k 50."""
    enc = get_tokenizer(tokenizer)
    ids = enc.encode_ordinary(prompt) if prompt else [enc.eot_token]
    idx = torch.tensor([ids], device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(idx, n_tokens, temperature=0.8, top_k=50, generator=gen)
    return prompt + enc.decode(out[0, len(ids) :].tolist())


def train_and_report(cfg: TrainConfig) -> dict:
    """train() for another process (minigpt.distributed.spawn_on_cpu): returns plain data, not the model."""
    result = train(cfg)
    return {"summary": result.summary(), "history": result.history, "state_dict": result.model.state_dict()}
