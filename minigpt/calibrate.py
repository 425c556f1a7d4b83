"""Calibrate the planner's clock: time real steps of the engine once per machine and torch, and keep the result.

A lone matmul misses what a precision costs around it (autocast's casts, fp16's scaler, the elementwise ops), so
this times the engine's own forward + backward of two-block GPTs of the presets' widths and vocabulary at three
shapes, and solves fp32's seconds per FLOP, per elementwise value and per layer; each other precision is fp32's
rates times its measured ratio (an emulated one: its extra time per FLOP). Then what the step does beyond that: the
optimizer step of each optimizer as the loop builds it (at two sizes: a cost per parameter and a fixed part), one
whole train_step (its time beyond forward, backward and the optimizer), each checkpointing mode's and the chunked
loss's extra time, LoRA on an fp32, an int8 and an nf4 base (the share of the weight gradients' matmuls freezing
saves, then unpacking's per value) and a step with offloading (per byte and per block). A lever's cost is a
difference between two timings of the same rounds, so the load of the moment, which moves both, mostly cancels. Each
timing is repeated in interleaved rounds, each step under the C heap's setting of the command the plan prints: the
median is kept, (max - min) / median is its spread. The result is cached as JSON per device type; a cache from
another machine or torch is measured again. benchmarks/RESULTS.md section 13 sets its predictions against measured
steps.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path

import torch

from minigpt import memory
from minigpt.budget import MALLOC_SETTING
from minigpt.config import TrainConfig
from minigpt.corpus import default_cache_dir
from minigpt.device import device_info
from minigpt.files import write_atomically
from minigpt.heap import MMAP_THRESHOLD_BYTES, set_mmap_threshold
from minigpt.model import ModelConfig, count_params
from minigpt.offload import ActivationOffloader
from minigpt.precision import precision_problem, probe_precision
from minigpt.quantize import dequantize, quantize
from minigpt.step import StepState, build_step_state, forward_backward, new_offloader, optimizer_step, train_step
from minigpt.step_time import (
    Calibration,
    elementwise_values_per_token,
    forward_flops_per_token,
    part_seconds,
    step_seconds,
)
from minigpt.timing import clock, interleaved_seconds

CALIBRATION_VERSION = 9  # bump when what is measured changes: older caches are measured again
PRECISIONS = ("fp32", "bf16", "fp16", "bf16-pure")
# Three steps per precision, (model, sequences of CTX tokens): two widths tell matmul FLOPs (which grow as the
# width squared) from elementwise values (as the width), and two batches tell both (which grow with the tokens)
# from the per-step cost of launching each layer's ops. The presets' vocabulary and context, and widths from 10m's
# to 30m's and past it: rates are measured at the sizes they predict. (Shapes of width 128-256 at ctx 128 with a
# vocabulary of 1024 steps of a few ms each, spread 20-50% over the rounds: their rates predicted 10m's and 30m's
# steps 13-82% too slow, benchmarks/RESULTS.md section 13 before this calibration.)
NARROW = ModelConfig(n_layer=2, n_head=4, n_embd=256, ctx=256, vocab_size=8192)
WIDE = ModelConfig(n_layer=2, n_head=8, n_embd=512, ctx=256, vocab_size=8192)
SHAPES = ((NARROW, 1), (WIDE, 1), (NARROW, 2))
LORA_RANK = 8
CTX, ROUNDS = 256, 5
# Two levers are timed on LONG_BATCH sequences of NARROW's, as 10m's 4 x 256, because what they cost depends on the
# step's size, not only on its FLOPs: the chunked loss does the head's matmuls again in chunks (of 128 tokens here)
# and saves the whole logits' fresh pages (at 1 x 256, chunks of 32 tokens, it cost 2.7 head forwards; at 10m's
# 4 x 256, none measurable); offloading's cost per byte grew with the bytes (a step at 1 x 256 predicted 10m's
# and 30m's offloading steps 21-24% too fast)
LONG_BATCH = 4
# A precision whose step takes this many times fp32's is emulated on this device (fp16 on most CPUs): it is timed
# once, on EMULATION_SHAPE, and planned with what it takes beyond fp32's there added per FLOP (see _solve; never the
# fastest, and its rounds at three shapes would take most of a minute). What fp16 adds per FLOP on this course's AMD
# CPU depends on the head's share of the FLOPs (its matmul costs more per FLOP emulated): 218-267 ps on NARROW (2
# blocks, the head 53% of the FLOPs), 207-209 ps with 4 or 6 blocks, 189-194 ps in 10m's step, 219 ps in 30m's (at
# ctx 512). NARROW on two blocks predicted 10m's fp16 step 23% too slow; six blocks (the head 27%) sit between.
EMULATED = 4.0
EMULATION_SHAPE = (ModelConfig(n_layer=6, n_head=4, n_embd=256, ctx=256, vocab_size=8192), 1)
# LoRA is timed on the same six blocks at LONG_BATCH sequences, paired with the plain step in rounds of its own: what
# freezing the base saves is a share of the weight gradients' matmuls that depends on the shape (measured in one
# process, paired: 58% of the FLOP model's saving on these six blocks at 4 x 256, 36% in 10m's step, 29% in 30m's;
# 1 x 256 steps of two-block models, fitted with a cost per block, predicted 10m's and 30m's LoRA steps 21% too fast)
LORA_MODEL, LORA_ROUNDS = EMULATION_SHAPE[0], 3
LORA_BASES = ("fp32", "int8", "nf4")  # the frozen bases a LoRA step is timed on
OFFLOAD_BYTES = 32 * 2**20
QUANTIZED_SHAPE = (1024, 1024)
CHECKPOINTS = ("full", "sqrt", "selective")


@contextlib.contextmanager
def small_shapes() -> Iterator[None]:
    """Within it, measure() times models of width 16-32 at ctx 32: its code paths in seconds, not rates worth keeping
    (the benchmarks' quick run and the tests)."""
    global NARROW, WIDE, SHAPES, EMULATION_SHAPE, LORA_MODEL, CTX, OFFLOAD_BYTES, QUANTIZED_SHAPE
    saved = NARROW, WIDE, SHAPES, EMULATION_SHAPE, LORA_MODEL, CTX, OFFLOAD_BYTES, QUANTIZED_SHAPE
    NARROW = ModelConfig(n_layer=1, n_head=1, n_embd=16, ctx=32, vocab_size=64)
    WIDE = replace(NARROW, n_embd=32)
    SHAPES, EMULATION_SHAPE = ((NARROW, 1), (WIDE, 1), (NARROW, 2)), (replace(NARROW, n_layer=2), 1)
    LORA_MODEL = EMULATION_SHAPE[0]
    CTX, OFFLOAD_BYTES, QUANTIZED_SHAPE = 32, 2**20, (64, 64)
    try:
        yield
    finally:
        NARROW, WIDE, SHAPES, EMULATION_SHAPE, LORA_MODEL, CTX, OFFLOAD_BYTES, QUANTIZED_SHAPE = saved


def cache_path(device_type: str) -> Path:
    """Where the calibration of this device type is kept: $MINIGPT_CACHE/calibration/<device>.json."""
    return default_cache_dir() / "calibration" / f"{device_type}.json"


def machine_key(device_type: str) -> dict:
    """What a calibration is valid for: this machine, its device, this torch and its thread count."""
    return {
        "version": CALIBRATION_VERSION,
        "machine": platform.node(),
        "device": device_info(torch.device(device_type)).name,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def shown(path: Path) -> str:
    """The path as a message shows it: the home folder as ~, so that no one's user name lands in a notebook."""
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


def calibration(device_type: str = "cpu", refresh: bool = False, path: Path | None = None) -> Calibration:
    """The cached calibration of this device if it was made here with this torch, else measured now and cached.

    refresh: measure again whatever the cache holds (`minigpt plan --recalibrate`). An unreadable cache is said
    on stderr and measured again, never a traceback.
    """
    path = path or cache_path(device_type)
    key = machine_key(device_type)
    if not refresh and path.exists():
        why = None
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            if saved.get("key") == key:
                cal = _from_json(saved["calibration"])
                return replace(cal, source=f"calibrated {cal.created}, cached in {shown(path)}")
            why = f"it was made for {_difference(saved.get('key') or {}, key)}"
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            why = f"it is unreadable ({type(error).__name__}: {error})"
        print(f"note: the step-time calibration {shown(path)}: {why}; measuring it again", file=sys.stderr)
    t0 = time.perf_counter()
    cal = measure(torch.device(device_type))
    took = time.perf_counter() - t0
    save(path, cal, device_type, took)
    return replace(cal, source=f"measured now in {took:.0f} s, cached in {shown(path)}")


def save(path: Path, cal: Calibration, device_type: str = "cpu", seconds: float = 0.0) -> None:
    """Cache `cal` at `path` as made on this machine with this torch (what calibration() reads back)."""
    saved = {"key": machine_key(device_type), "seconds": seconds, "calibration": asdict(replace(cal, source=""))}
    text = json.dumps(saved, indent=1)
    write_atomically(path, lambda f: f.write(text.encode()))


def _difference(old: dict, new: dict) -> str:
    changed = [f"{k} {old.get(k)!r}" for k in new if old.get(k) != new[k]]
    return ", ".join(changed) + f" (now {', '.join(repr(new[k]) for k in new if old.get(k) != new[k])})"


def _from_json(saved: dict) -> Calibration:
    cal = Calibration(**saved)
    compute = {p: tuple(float(x) for x in rates) for p, rates in cal.compute.items()}
    if any(len(rates) != 3 for rates in compute.values()):
        raise ValueError("a precision's rates are not (per FLOP, per value, per layer)")
    if not set(PRECISIONS) <= set(compute) or not {"adamw", "adamw8bit"} <= set(cal.optimizer):
        raise ValueError("a precision or an optimizer is missing")
    return replace(cal, compute=compute)


# ----------------------------------------------------------------------------------------------------------
# The measurement


def _median(times: list[float], spread: dict, name: str) -> float:
    """The median of the rounds; their (max - min) / median goes into `spread` under `name`."""
    med = statistics.median(times)
    spread[name] = (max(times) - min(times)) / med if med > 0 else 0.0
    return med


def _state(model: ModelConfig, batch: int, device: torch.device, **levers) -> tuple[StepState, list]:
    cfg = TrainConfig(batch=batch, ctx=CTX, verbose=False, **levers)
    x = torch.randint(0, model.vocab_size, (batch, CTX + 1), generator=torch.Generator().manual_seed(0))
    return build_step_state(model, cfg, device), [(x[:, :-1], x[:, 1:])]


def _forward_backward(state: StepState, batch: list, precision: str, device: torch.device) -> Callable[[], None]:
    """One forward + backward, with the offloader of a window when the state offloads (as train_step runs it)."""

    def run() -> None:
        offload = new_offloader(state, device)
        with offload or contextlib.nullcontext():
            forward_backward(state.forward, batch, device, precision, state.scaler, offload)
        state.optimizer.zero_grad(set_to_none=True)

    return run


def _train_step(state: StepState, batch: list, device: torch.device) -> Callable[[], None]:
    """One whole train_step in fp32: forward, backward, optimizer, and what the step does around them."""
    return lambda: train_step(state, batch, device, "fp32", grad_clip=1.0)


def _optimizer_step(state: StepState, batch: list, precision: str, device: torch.device) -> Callable[[], None]:
    """One optimizer_step (clip, step, zero) on the gradients of one real backward, kept and put back each time."""
    forward_backward(state.forward, batch, device, precision, state.scaler)
    params = [p for p in state.model.parameters() if p.grad is not None]
    grads = [p.grad.clone() for p in params]

    def run() -> None:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer_step(state, grad_clip=1.0)

    return run


def _emulated(supported: list[str], device: torch.device) -> dict[str, float]:
    """Each precision whose step on EMULATION_SHAPE takes EMULATED times fp32's or more, with what it takes beyond
    fp32's there per FLOP: one step of each after a first one (a precision that slow is never planned for speed,
    and more rounds of it would take most of the calibration's time)."""
    model, batch = EMULATION_SHAPE
    seconds = {}
    for precision in supported:
        master = {"master_weights": True} if precision == "bf16-pure" else {}
        state, xy = _state(model, batch, device, precision=precision, **master)
        run = _under_the_commands_heap(_forward_backward(state, xy, precision, device), offloading=False)
        run()  # a first step: kernels chosen, caches made
        start = clock(device)
        run()
        seconds[precision] = clock(device) - start
    flops = _features(model, batch)[0]
    slow = [p for p in supported if seconds[p] >= EMULATED * seconds["fp32"]]
    return {p: (seconds[p] - seconds["fp32"]) / flops for p in slow}


def _under_the_commands_heap(run: Callable[[], None], offloading: bool) -> Callable[[], None]:
    """`run`, under the C heap's setting of the `minigpt train` command the budget plan prints (budget.MALLOC_SETTING:
    blocks of 64 KiB or more get pages of their own, so that the resident memory follows the live tensors), or the
    offloader's 128 KiB where the step offloads, set again at every call.

    The setting is the process's and it stays, and it moves a step's time: blocks given pages of their own are fresh
    pages (page faults) at every step. Measured on a 10m step at 4 x 256: 1.06-1.15 s with the heap serving blocks
    up to 4 MiB, 1.44-1.70 s after the offloader's 128 KiB (170,000 page faults a step instead of 35,000)."""
    threshold = MMAP_THRESHOLD_BYTES if offloading else int(MALLOC_SETTING["MALLOC_MMAP_THRESHOLD_"])

    def run_as_planned() -> None:
        set_mmap_threshold(threshold)
        run()

    return run_as_planned


def measure(device: torch.device, rounds: int = ROUNDS) -> Calibration:
    """Time everything the plan needs, in `rounds` interleaved rounds after a warm-up round; see the module doc."""
    supported = [p for p in PRECISIONS if precision_problem(probe_precision(device, p)) is None]
    runs: dict[str, Callable[[], object]] = {}
    params: dict[str, int] = {}  # trained parameters of each optimizer step timed
    emulated = _emulated(supported, device)
    for precision in (p for p in supported if p not in emulated):
        master = {"master_weights": True} if precision == "bf16-pure" else {}
        for i, (model, batch) in enumerate(SHAPES):
            state, xy = _state(model, batch, device, precision=precision, **master)
            runs[f"{precision} {i}"] = _forward_backward(state, xy, precision, device)
            if model is WIDE:  # the optimizer of the widest model: the most parameters per tensor
                runs[f"{precision} optimizer"] = _optimizer_step(state, xy, precision, device)
                params[precision] = sum(p.numel() for p in state.model.parameters())
    state, xy = _state(NARROW, 1, device)  # a second size of AdamW's step: its fixed cost from the two
    runs["fp32 optimizer narrow"] = _optimizer_step(state, xy, "fp32", device)
    params["fp32 narrow"] = count_params(NARROW)
    state, xy = _state(WIDE, 1, device, optimizer="adamw8bit")  # eager, as the loop builds it without --compile
    runs["adamw8bit optimizer"] = _optimizer_step(state, xy, "fp32", device)
    state, xy = _state(WIDE, 1, device)
    runs["fp32 train_step"] = _train_step(state, xy, device)
    for kind in ("int8", "nf4"):  # unpacking alone: the least a LoRA step on this base adds
        q = quantize(torch.randn(QUANTIZED_SHAPE, device=device), kind)
        runs[f"unpack {kind}"] = lambda q=q: dequantize(q.codes, q.scales, q.shape, torch.float32)
    runs["offload"] = offload_round_trip(device, OFFLOAD_BYTES)  # the bytes alone: the least offloading adds
    runs = {name: _under_the_commands_heap(run, "offload" in name) for name, run in runs.items()}

    # timing.clock: this process's CPU time on a CPU (other programs do not inflate it), the wall clock after the
    # queued work on a GPU; the warm-up round chooses kernels and makes caches and AdamW's state
    times = _alone_first(device, rounds) | _lora_paired(device, LORA_ROUNDS) | interleaved_seconds(runs, rounds, device)
    spread: dict[str, float] = {}
    t = {name: _median(ts, spread, name) for name, ts in times.items()}
    return _solve(t, spread, supported, params, device.type, emulated)


def _alone_first(device: torch.device, rounds: int) -> dict[str, list[float]]:
    """The chunked loss, offloading and each checkpointing mode (the last two at two sizes: a cost per byte or per
    forward, and per block), timed before any other model is made, in rounds of their own with the plain steps they
    are set against: as a training process runs them, with one model alive. Each lever's cost is the median of its
    rounds' differences to the plain step.

    Offloading's cost per byte depends on what else the process holds: a NARROW step at 4 x 256 with offloading
    cost 162 ms more than without in a process holding a few small models, 212 ms with the calibration's thirty
    models alive, 280 ms timed among them (one process, quiet, 2 threads). Fresh processes paid 160-166 ms."""
    long = f"x{LONG_BATCH}"
    levers = {"chunked": {"loss_chunks": 8}, "offload": {"offload_activations": True}}
    levers |= {mode: {"checkpointing": mode} for mode in CHECKPOINTS}
    sizes = {long: LONG_BATCH, "narrow": 1}
    # every lever at both sizes (a cost per unit and a fixed part) but the chunked loss, which needs one
    pairs = [(name, size) for name in levers for size in sizes if name != "chunked" or size == long]
    runs = {}
    for name, size in [("plain", size) for size in sizes] + pairs:
        state, xy = _state(NARROW, sizes[size], device, **levers.get(name, {}))
        run = _forward_backward(state, xy, "fp32", device)
        runs[f"fp32 {name} {size}"] = _under_the_commands_heap(run, offloading=name == "offload")
    times = interleaved_seconds(runs, rounds, device)
    for name, size in pairs:
        times[f"{name} extra {size}"] = _paired_differences(times[f"fp32 {name} {size}"], times[f"fp32 plain {size}"])
    return times


def _paired_differences(lever: list[float], plain: list[float]) -> list[float]:
    """Each round's time beyond the plain step of the same round: a slow round moves both, not the difference."""
    return [a - b for a, b in zip(lever, plain)]


def _lora_paired(device: torch.device, rounds: int) -> dict[str, list[float]]:
    """LoRA on an fp32, an int8 and an nf4 base at LONG_BATCH sequences of LORA_MODEL, each round's difference to the
    plain step of the same round ("lora {base} extra"): what freezing saves, and what unpacking adds."""
    runs = {"plain": _forward_backward(*_state(LORA_MODEL, LONG_BATCH, device), "fp32", device)}
    for kind in LORA_BASES:
        state, xy = _state(LORA_MODEL, LONG_BATCH, device, lora_rank=LORA_RANK, base_dtype=kind)
        runs[kind] = _forward_backward(state, xy, "fp32", device)
    times = interleaved_seconds({k: _under_the_commands_heap(run, False) for k, run in runs.items()}, rounds, device)
    return {f"lora {kind} extra": _paired_differences(times[kind], times["plain"]) for kind in LORA_BASES}


def _features(model: ModelConfig, batch: int) -> list[float]:
    """One forward + backward's FLOPs, elementwise values and layers (the blocks and the head) at CTX tokens."""
    tokens = batch * CTX
    flops, values = forward_flops_per_token(model, CTX), elementwise_values_per_token(model)
    return [3 * tokens * sum(flops.values()), tokens * sum(values.values()), model.n_layer + 1]


def _fit(seconds: list[float]) -> tuple[float, float, float]:
    """Seconds per FLOP, per value and per layer from the three steps; a term the noise made negative is dropped
    (least squares on the others), so every rate stays >= 0."""
    features = torch.tensor([_features(model, batch) for model, batch in SHAPES], dtype=torch.float64)
    t = torch.tensor(seconds, dtype=torch.float64)[:, None]
    for keep in ([0, 1, 2], [0, 2], [0, 1], [0]):
        coef = torch.linalg.lstsq(features[:, keep], t).solution.flatten().tolist()
        if min(coef) >= 0:
            full = dict(zip(keep, coef))
            return full.get(0, 0.0), full.get(1, 0.0), full.get(2, 0.0)
    return seconds[1] / _features(*SHAPES[1])[0], 0.0, 0.0  # per FLOP of the wide step, all of its time


def _solve(
    t: dict, spread: dict, supported: list[str], params: dict[str, int], device_type: str, emulated: dict | None = None
) -> Calibration:
    """The calibration from the medians of the rounds; `emulated`: each precision timed on EMULATION_SHAPE alone,
    with its extra seconds per FLOP there."""
    # fp32's three rates from its three shapes; another precision's are fp32's times the median ratio of its steps to
    # fp32's at the same shapes (fitting three rates to each precision's own noisy steps predicted 10m's and 30m's
    # bf16-pure steps 20-22% too fast; the ratio, within 12-19%). An EMULATED one is slow in its matmuls alone: what its
    # step on EMULATION_SHAPE takes beyond fp32's is added per FLOP (fp16 on this course's CPUs: a ratio of the whole
    # step predicted 30m's fp16 step 23% too fast; per FLOP, 10m's and 30m's within 10%).
    compute, emulated = {"fp32": _fit([t[f"fp32 {i}"] for i in range(len(SHAPES))])}, emulated or {}
    for p in supported:
        if p in emulated:
            per_flop, per_value, per_layer = compute["fp32"]
            compute[p] = (per_flop + max(0.0, emulated[p]), per_value, per_layer)
        else:
            ratio = statistics.median(t[f"{p} {i}"] / t[f"fp32 {i}"] for i in range(len(SHAPES)))
            compute[p] = tuple(rate * ratio for rate in compute["fp32"])
    for p in PRECISIONS:  # one the device cannot run is never planned, but every precision has a rate
        compute.setdefault(p, compute["fp32"])
    # AdamW's step at two sizes: seconds per parameter, and a fixed part (clipping's and the schedule's launches)
    wide, narrow = params["fp32"], params["fp32 narrow"]
    adamw = max(0.0, (t["fp32 optimizer"] - t["fp32 optimizer narrow"]) / (wide - narrow))
    fixed = max(0.0, t["fp32 optimizer"] - adamw * wide)
    if adamw == 0.0 or fixed == 0.0:  # the noise hid one of the two parts: count all of the step per parameter
        adamw, fixed = t["fp32 optimizer"] / wide, 0.0
    per_param = {p: max(0.0, t[f"{p} optimizer"] - fixed) / params[p] for p in supported if p in params}
    around = max(0.0, t["fp32 train_step"] - t["fp32 1"] - t["fp32 optimizer"])  # train_step beyond its parts
    # each lever's extra time as a share of the forward of the part it redoes, from the fp32 rates (a forward is a
    # third of a forward + backward)
    head = _forward_seconds(NARROW, compute["fp32"], LONG_BATCH)["head"]
    recompute = {m: _recompute(t, m, compute["fp32"]) for m in CHECKPOINTS}
    adamw8bit = (t["adamw8bit optimizer"] - fixed) / wide
    if adamw8bit <= 0.0:  # the noise made the 8-bit step look cheaper than the fixed part: all of it per parameter
        adamw8bit = t["adamw8bit optimizer"] / wide
    cal = Calibration(
        compute=compute,
        optimizer={"adamw": adamw, "adamw8bit": adamw8bit},
        optimizer_extra={p: max(0.0, per_param[p] - adamw) for p in per_param},
        recompute={"none": 0.0} | {m: share for m, (share, _) in recompute.items()},
        recompute_per_layer={m: per_layer for m, (_, per_layer) in recompute.items()},
        chunked_loss=max(0.0, t[f"chunked extra x{LONG_BATCH}"] / head),
        unpack={kind: t[f"unpack {kind}"] / (QUANTIZED_SHAPE[0] * QUANTIZED_SHAPE[1]) for kind in ("int8", "nf4")},
        offload=2 * OFFLOAD_BYTES / t["offload"],
        per_step=fixed + around,
        spread=spread,
        created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    offload, offload_fixed = _offload_in_a_step(t, cal, device_type)
    saving, unpack = _lora_in_a_step(t, cal)
    offload_per_layer = offload_fixed / NARROW.n_layer
    return replace(cal, lora_saving=saving, unpack=unpack, offload=offload, offload_per_layer=offload_per_layer)


def _forward_seconds(model: ModelConfig, rates: tuple[float, float, float], batch: int = 1) -> dict[str, float]:
    """The forward alone of each part (the blocks, the head) of `model` at `batch` sequences of CTX tokens: a third
    of forward + backward at these rates."""
    matmuls, rest = part_seconds(model, batch * CTX, CTX, rates)
    return {k: (matmuls[k] + rest[k]) / 3 for k in matmuls}


def _recompute(t: dict, mode: str, rates: tuple[float, float, float]) -> tuple[float, float]:
    """(share of the blocks' forward, seconds per block) a checkpointing mode adds, from _alone_first's paired
    differences at 1 and LONG_BATCH sequences of NARROW's (both have its blocks). Noise that makes either negative
    puts it all in the other. (Fitted instead to NARROW's and WIDE's steps at 1 x 256, each timed apart from the
    plain step, the share moved from 0.61 to 1.47 between calibrations and predicted 10m's full checkpointing 11-28%
    too cheap: at 4 x 256, 10m, NARROW and WIDE all paid 1.2-1.5 forwards of their blocks, measured in one process.)"""
    extra_narrow, extra_long = t[f"{mode} extra narrow"], t[f"{mode} extra x{LONG_BATCH}"]
    narrow, long = (_forward_seconds(NARROW, rates, batch)["blocks"] for batch in (1, LONG_BATCH))
    share = (extra_long - extra_narrow) / (long - narrow)
    per_layer = (extra_long - share * long) / NARROW.n_layer
    if share < 0:
        return 0.0, max(0.0, extra_long / NARROW.n_layer)
    if per_layer < 0:
        return max(0.0, extra_long / long), 0.0
    return share, per_layer


def _lora_in_a_step(t: dict, cal: Calibration) -> tuple[float, dict[str, float]]:
    """(the share of the weight gradients' matmuls a frozen base saves, seconds per value unpacked) from
    _lora_paired's differences: an fp32 base's step beyond the plain one against the FLOP model's saving (a third of
    the matmuls), and an int8 or nf4 base's beyond the fp32 base's over the values it unpacks (twice the blocks'
    weights: forward and backward), at least unpacking alone's rate, which the noise cannot undercut."""
    n, tokens = count_params(LORA_MODEL), LONG_BATCH * CTX
    full = replace(cal, lora_saving=1.0, unpack={kind: 0.0 for kind in cal.unpack})
    predicted = step_seconds(LORA_MODEL, tokens, CTX, n, full)["compute"]
    predicted -= step_seconds(LORA_MODEL, tokens, CTX, n, full, lora_base="fp32", trained_params=1)["compute"]
    saving = min(1.0, max(0.0, -t["lora fp32 extra"] / predicted)) if predicted > 0 else 1.0
    unpacked = 2 * (n - LORA_MODEL.vocab_size * LORA_MODEL.n_embd)
    extra = {kind: t[f"lora {kind} extra"] - t["lora fp32 extra"] for kind in cal.unpack}
    return saving, {kind: max(alone, extra[kind] / unpacked) for kind, alone in cal.unpack.items()}


def _offload_in_a_step(t: dict, cal: Calibration, device_type: str) -> tuple[float, float]:
    """(bytes per second of a round trip, fixed seconds a step) of --offload-activations, from a step with it at
    1 and LONG_BATCH sequences of NARROW's: its time beyond the plain step's against the bytes it moves
    (minigpt.memory). The fixed part is the offloader's file or copy per saved tensor (per block: both steps have
    NARROW's blocks); the rate is at most that of the bytes alone. All four steps are _alone_first's."""

    def moved(batch: int) -> int:
        return memory.estimate(NARROW, batch, CTX, "fp32", device=device_type, offload_activations=True).offloaded or 0

    points = [(moved(1), t["offload extra narrow"]), (moved(LONG_BATCH), t[f"offload extra x{LONG_BATCH}"])]
    (small, extra_small), (large, extra_large) = points
    if large <= small or extra_large <= 0:
        return cal.offload, 0.0
    per_byte = max(2 / cal.offload, (extra_large - extra_small) / (large - small))  # out and back: 2 bytes moved
    fixed = extra_large - per_byte * large
    if fixed < 0:  # the noise made the smaller step the dearer per byte: all of it per byte
        per_byte, fixed = max(2 / cal.offload, extra_large / large), 0.0
    return 2 / per_byte, fixed


def offload_round_trip(device: torch.device, n_bytes: int = OFFLOAD_BYTES) -> Callable[[], None]:
    """A call that moves n_bytes out and back as --offload-activations does: on a CPU through the offloader's own
    temp file (a folder and a named file made and removed at each call, as this once did, cost 31-95 ms for 32 MiB
    from one run to the next, and capped the calibration's offloading rate at the slowest); on CUDA one copy each
    way to a pinned host buffer made beforehand, as the offloader copies (timing.clock waits for them)."""
    data = torch.ones(n_bytes, dtype=torch.uint8, device=device)
    if device.type == "cuda":
        host = torch.empty(n_bytes, dtype=torch.uint8, pin_memory=True)

        def pinned() -> None:
            host.copy_(data, non_blocking=True)
            data.copy_(host, non_blocking=True)

        return pinned

    offloader = ActivationOffloader([], device)  # its own file and its own writes and reads, nothing else
    back = torch.empty_like(data)

    def through_a_file() -> None:  # as a window of training: a nameless file opened, written, read, closed
        with offloader:
            offloader._write(data.data_ptr(), n_bytes, 0)
            offloader._read(back, 0)

    return through_a_file
