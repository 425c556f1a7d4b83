"""The training loop: a config in, a trained model out, with a run folder, logging and a progress bar.

train(cfg) builds one step (minigpt.step) and runs it `cfg.steps` times. Around the step, and only here:
the run folder (checkpoints and log.jsonl, minigpt.run_state), evaluation, progress, the final sample, and
torchrun's processes (rank 0 alone writes). Checkpoints hold the whole state whatever --shard splits, so a
run can resume with another --shard or number of processes.

A run never loses work: Ctrl-C (or SIGTERM) stops it after the current step and saves a checkpoint,
a NaN or inf loss stops it without saving the ruined weights, and a new run never overwrites a saved one.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from minigpt import parallel
from minigpt.config import TrainConfig, lr_at  # noqa: F401 - lr_at re-exported for the chapters
from minigpt.data import TokenData, load_tokens
from minigpt.device import check_compile, pick_device
from minigpt.finetune import base_entry, check_base, check_source, load_source
from minigpt.heap import tame_heap
from minigpt.lora import describe_trainable
from minigpt.model import GPT
from minigpt.optim import FUSED_ADAMW_DEVICES, MasterWeights, fused_adamw_supported, make_optimizer  # noqa: F401
from minigpt.precision import autocast_context, check_precision
from minigpt.run_state import RunFolder, StopSignals, resume_changes, rng_state, set_rng_state
from minigpt.sampling import sample_text  # noqa: F401 - re-exported: it lived here before
from minigpt.step import (  # noqa: F401 - forward_backward, optimizer_step: re-exported for the chapters
    DifferentModel,
    StepState,
    build_step_state,
    follow_schedule,
    forward_backward,
    gather_checkpoint,
    optimizer_step,
    restore_step,
    shard_checkpoint,
    step_checkpoint,
    train_step,
    unsharded_model,
    window_micro_batches,
)


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
            "first_train_loss": self.losses[0] if self.history else None,
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


class TrainingDiverged(RuntimeError):
    """The loss became NaN or inf: the weights are ruined, so the run stops without saving them."""

    def __init__(self, message: str, result: TrainResult) -> None:
        super().__init__(message)
        self.result = result  # the steps before the bad one (result.model holds the ruined weights)


def diverged_message(loss: float, step: int, cfg: TrainConfig, run: RunFolder | None, what: str = "the loss") -> str:
    """What happened, what was kept, and what to check."""
    if run is None:
        kept = "nothing was saved (no --out)"
    elif run.saved_step is None:
        kept = f"nothing was saved in {run.path} yet (--restart moves its log aside to start over)"
    else:
        kept = f"the last good checkpoint (step {run.saved_step}) in {run.path} is kept"
    precision = (
        f"the precision (try fp32 to rule out {cfg.precision} rounding)"
        if cfg.precision != "fp32"
        else "the precision is fp32 already, so not rounding"
    )
    return (
        f"training diverged: {what} is {loss} at step {step} ({cfg.precision}, lr {cfg.lr:g}); {kept}. "
        f"Check the learning rate (a lower --lr, more --warmup-steps), the data (--corpus); {precision}"
    )


def _weights_finite(model: torch.nn.Module) -> bool:
    """Whether every floating-point parameter holds only finite values (this process's shard, under FSDP)."""
    return all(bool(torch.isfinite(p).all()) for p in model.parameters() if p.is_floating_point())


def json_line(record: dict) -> str:
    """A log record as strict JSON: a non-finite number (an fp16 step's inf loss, which the scaler skipped) is
    written as null, not as the bare NaN or Infinity that strict parsers reject."""
    return json.dumps({k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in record.items()})


def _stop_requested(stop_signal: StopSignals, world: int) -> str | None:
    """The signal that stops this run after the current step; under torchrun, any process's (all stop together)."""
    received = stop_signal.received  # read once: every process must decide from what it sent
    if world == 1:
        return received
    # A signal that lands while the all-reduce runs waits for the next step's. Read again after it, it would stop
    # this process alone, and the others would wait in the next step's collective for ever.
    anyone = parallel.sum_across_processes(float(received is not None)) > 0  # every process calls it
    return received or ("SIGTERM" if anyone else None)


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

    rank, world = parallel.setup(cfg.device)  # (0, 1) unless launched by torchrun
    device = pick_device(cfg.device if world == 1 else parallel.local_device(cfg.device))
    check_precision(device, cfg.precision)  # no silent no-op: fail now if this device can't do it
    if cfg.base_dtype == "bf16":  # a bf16 base needs bf16 where it runs, as --precision bf16 does
        check_precision(device, "bf16")
    if cfg.compile:
        check_compile(device)
    torch.manual_seed(cfg.seed)  # dropout's RNG
    # Without this, a CPU run's resident memory grows with the number of micro-batches (freed tensors stay in
    # glibc's heap, in holes): minigpt.heap explains; bench_accum_rss measures it against --accum.
    tame_heap(accumulating=cfg.accum > 1)
    say = print if (cfg.verbose and rank == 0) else (lambda *a, **k: None)
    if world == 1 and cfg.shard != "none":
        say(f"--shard {cfg.shard} with one process: nothing to split, so it trains as --shard none")
    sharded = world > 1 and cfg.shard != "none"  # some state is split: saving gathers it from every process
    fsdp = world > 1 and cfg.shard == "fsdp"  # every forward needs every process (they gather the weights)

    run = RunFolder(cfg.out) if cfg.out else None
    with contextlib.ExitStack() as held:  # what the run holds until it returns or fails: lock, log, bar
        if run and rank == 0:  # the run folder is checked and locked before any slow work
            run.check_usable()
            if cfg.resume:
                run.check_resumable()  # before the lock, which makes the folder: a resume that fails leaves none
            held.enter_context(run.locked())  # a second run on this folder stops here
            if cfg.restart and cfg.init_from and Path(cfg.init_from).resolve() == run.path.resolve():
                raise ValueError(
                    f"--init-from {cfg.init_from} is the run --restart would move aside (--out): choose another --out"
                )
        saved = run.load(asdict(cfg), cfg.steps) if cfg.resume else None  # one that does not fit cfg stops here
        if run and not cfg.resume and not cfg.restart and rank == 0:
            run.check_fresh()
        # --init-from: the source run's weights. A LoRA run needs them on resume too (it saved only its adapters).
        init_from = cfg.init_from or ((saved or {}).get("base") or {}).get("init_from")
        source = load_source(init_from) if init_from and (cfg.lora_rank or not saved) else None
        if source:
            check_source(cfg, source)
            if saved:
                check_base(saved, source, run.path)
            else:
                say(f"starting from {source.path} (its step {source.step}) with a fresh optimizer and schedule")

        data = data or load_tokens(cfg.corpus, cfg.tokenizer, builtin=cfg.builtin_corpus)
        data.check_ctx(cfg.ctx)
        step_tokens = cfg.batch * cfg.accum * world * cfg.ctx
        if rank == 0 and step_tokens > len(data.train):  # runs, but hardly what anyone meant
            print(
                f"warning: one step takes {step_tokens:,} tokens (batch x accum x processes x ctx), more than the "
                f"corpus's {len(data.train):,} training tokens; a smaller --batch or --accum gives more steps",
                file=sys.stderr,
            )
        # --restart moves the old run aside only now, once every other setting has been checked and loaded
        if run and rank == 0 and cfg.restart:
            aside = run.move_aside()
            if aside:  # said even under --json (on stderr): files moved are worth a line
                print(f"--restart: moved the run in {run.path} to {aside} (nothing deleted)", file=sys.stderr)
        # the source hands its weights over: the model becomes their only holder (see Source.take_weights)
        state = build_step_state(cfg.model_config(), cfg, device, source.take_weights() if source else None)
        model = state.model
        if cfg.lora_rank:
            random_base = "" if source else " (no --init-from: the frozen base is this run's random initialization)"
            say(describe_trainable(model) + random_base)
        data_gen = torch.Generator().manual_seed(cfg.seed)

        result = TrainResult(cfg, model, effective_batch=cfg.batch * cfg.accum * world)
        start = 0
        if saved:
            start = restore_checkpoint(run, shard_checkpoint(saved, state), state, result, data_gen)
            parallel.steps_to_param_device(state.optimizer)
            if start == cfg.steps:
                say(f"{run.path} is already finished: {start} of {cfg.steps} steps; pass a larger --steps to go on")
                result.already_finished = True
                parallel.teardown()
                return result
            next_lr = follow_schedule(state, cfg)  # the given --lr, --steps, --warmup-steps from here on
            changed = resume_changes(saved["train_config"], asdict(cfg))
            say(f"resumed from {run.checkpoint} at step {start}")
            if changed:
                say(f"changed on resume: {', '.join(changed)}; step {start + 1} uses lr {next_lr:.3g}")

        def save() -> None:
            if not run:
                return
            if not _weights_finite(model):  # the last update ruined them: never saved, as a finished run or any
                step = len(result.history)
                raise TrainingDiverged(diverged_message("not finite", step, cfg, run, "a weight"), result)
            whole = gather_checkpoint(state) if sharded else None  # every process takes part in the gathering
            if rank == 0:
                run.save({**checkpoint_snapshot(cfg, state, result, data_gen, whole), **base_entry(cfg, source)})
            parallel.barrier()  # nobody goes on (or exits) before the checkpoint is written

        # DDP averages the gradients (also under zero1); FSDP's own hooks gather weights and reduce gradients
        ddp_model = parallel.wrap(state.forward, device) if world > 1 and not fsdp else state.forward
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
                    log.write(json_line(record) + "\n")
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

    # The steps are done and saved: a signal now (while sampling, say) must not turn the run into a failure. It is
    # noted and let be; a second one stops at once (KeyboardInterrupt), as during the steps.
    with StopSignals():
        if fsdp:  # every process gets the whole trained model back, for sampling and for the caller
            result.model = unsharded_model(model, cfg, device)
        if cfg.sample_tokens and rank == 0 and not result.interrupted:
            result.sample = sample_text(result.model, cfg.tokenizer, cfg.sample_tokens, device, seed=cfg.seed)
        parallel.teardown()
        if result.history and not result.interrupted:
            s = result.summary()
            say(
                f"done: {s['steps']} steps, train loss {s['final_train_loss']:.3f}, val loss "
                f"{s['final_val_loss'] or float('nan'):.3f}, {s['tokens_per_s']:,.0f} tokens/s"
            )
    return result


def checkpoint_snapshot(
    cfg: TrainConfig, state: StepState, result: TrainResult, data_gen: torch.Generator, whole: dict | None = None
) -> dict:
    """Everything the loop needs to continue after len(result.history) steps, as RunFolder.save writes it."""
    return {
        **step_checkpoint(state, whole),
        "rng": rng_state(data_gen),
        "step": len(result.history),
        "history": result.history,
        "val_history": result.val_history,
        "train_config": asdict(cfg),
        "model_config": state.model.cfg.to_dict(),
    }


def restore_checkpoint(
    run: RunFolder, saved: dict, state: StepState, result: TrainResult, data_gen: torch.Generator
) -> int:
    """Put a loaded checkpoint into the step state, the history and the RNGs; return the step to continue from."""
    try:
        restore_step(state, saved)
    except DifferentModel as err:
        raise run.different_model(err) from None
    set_rng_state(saved["rng"], data_gen)
    result.history, result.val_history = saved["history"], [tuple(v) for v in saved["val_history"]]
    return saved["step"]


def train_and_report(cfg: TrainConfig) -> dict:
    """train() for another process (minigpt.distributed.spawn_on_cpu): returns plain data, not the model."""
    result = train(cfg)
    return {"summary": result.summary(), "history": result.history, "state_dict": result.model.state_dict()}
