"""9. The optimizer state and the gradients: 8-bit AdamW and the optimizer step in backward, against AdamW.

Baseline: bf16 autocast and full checkpointing, fused AdamW with an ordinary step, no clipping (the step in
backward cannot clip by the global norm, so no configuration clips and the times compare like with like).
For 10m (batch 8 x 256) and 125m (batch 8 x 1024), each lever alone and both: the predicted peak
(minigpt.memory.estimate) and the measured one (minigpt.memory.measure), the moments where the levers act
(the end of backward, the optimizer step), and the step time against the baseline's (train_step, the
configurations taking turns step by step on the same batch, in a rotating order; the ratio is the median over
turns of a configuration's time over the baseline's in the same turn). Then the 8-bit optimizer step alone
against fused AdamW's, on the same real gradients: eager, and compiled into one pass, by each kernel: the C loop
(what --compile runs on a CPU, one call a step) and torch.compile's pass (one call a chunk). Their build and compile
times, paid before or at the first step, are reported apart and never timed as a step. Where torchao is installed (pip
install -e '.[bench]'; the tests never need it), torchao.optim.AdamW8bit is the reference: its state bytes,
the loss after the same steps, its step time.

    python -m benchmarks.bench_optimizers [--quick] [--device cpu]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.benchlib import (
    MIB,
    Check,
    Section,
    clock,
    main_for,
    median_spread,
    pyplot,
    save_figure,
    size_for,
    table,
    token_data,
)
from minigpt.data import TokenData
from minigpt.device import check_compile
from minigpt.memory import estimate, measure
from minigpt.model import get_config
from minigpt.optim import kernel
from minigpt.optim.adamw8bit import AdamW8bit
from minigpt.optim.kernel import kernel_unavailable
from minigpt.step import build_step_state, forward_backward, train_step
from minigpt.train import TrainConfig

CONFIGS = {
    "AdamW": {},
    "8-bit": dict(optimizer="adamw8bit"),
    "in backward": dict(optimizer_in_backward=True),
    "both": dict(optimizer="adamw8bit", optimizer_in_backward=True),
}
PRECISION, CHECKPOINTING = "bf16", "full"
PEAK_125M_8BIT = 2060 * MIB  # issue 25: 8-bit AdamW takes 125m's predicted peak from 2,721 MiB to at most this
MEASURED_WITHIN = 0.02  # ... measured within 2% of the prediction
MAX_IN_BACKWARD_TIME = 1.05  # the step in backward: at most 1.05x the baseline's step time
MAX_8BIT_STEP = 1.5  # the 8-bit optimizer step as --compile runs it (eager where nothing compiles): <= 1.5x fused AdamW
SIZES = {
    False: dict(
        models=[dict(preset="10m", batch=8, ctx=256, warmup=2, steps=10), dict(preset="125m", batch=8, ctx=1024)],
        big_steps=(1, 3),  # 125m: warm-up and timed turns (a CPU step takes tens of seconds)
        optimizer_rounds={"10m": 20, "125m": 5},  # 125m: a turn of the four optimizers takes seconds
        reference_steps=30,
        reference_preset="10m",
    ),
    True: dict(
        models=[dict(preset="tiny", batch=2, ctx=32, warmup=1, steps=2)],
        big_steps=(1, 1),
        optimizer_rounds={"tiny": 2},
        reference_steps=2,
        reference_preset="tiny",
    ),
    "cuda": dict(
        models=[dict(preset="10m", batch=8, ctx=256, warmup=3, steps=20), dict(preset="125m", batch=8, ctx=1024)],
        big_steps=(3, 15),
        optimizer_rounds={"10m": 50, "125m": 20},
        reference_steps=30,
        reference_preset="10m",
    ),
}


def train_config(model: dict, device: torch.device, **levers) -> TrainConfig:
    return TrainConfig(
        preset=model["preset"],
        batch=model["batch"],
        ctx=model["ctx"],
        precision=PRECISION,
        checkpointing=CHECKPOINTING,
        grad_clip=0.0,
        device=str(device),
        **levers,
    )


def interleaved_step_times(model: dict, data: TokenData, device: torch.device) -> dict[str, list[float]]:
    """Seconds per train_step for each configuration, taking turns on the same batch (untimed warm-up first)."""
    states = {
        name: build_step_state(get_config(model["preset"]), train_config(model, device, **levers), device)
        for name, levers in CONFIGS.items()
    }
    names, times = list(CONFIGS), {name: [] for name in CONFIGS}
    gen = torch.Generator().manual_seed(0)
    for turn in range(model["warmup"] + model["steps"]):
        x, y = data.get_batch("train", model["batch"], model["ctx"], gen)
        shift = turn % len(names)  # who goes first rotates: on a CPU the step before matters
        for name in names[shift:] + names[:shift]:
            start = clock(device)
            train_step(states[name], [(x, y)], device, PRECISION, grad_clip=0.0)
            if turn >= model["warmup"]:
                times[name].append(clock(device) - start)
    return times


def memory_rows(model: dict, device: torch.device) -> dict[str, dict]:
    """Per configuration: the predicted and measured breakdowns of one step."""
    args = (get_config(model["preset"]), model["batch"], model["ctx"], PRECISION, CHECKPOINTING)
    return {
        name: {
            "predicted": estimate(*args, device=device, **levers),
            "measured": measure(*args, device=device, **levers),
        }
        for name, levers in CONFIGS.items()
    }


C_LOOP, INDUCTOR = "AdamW8bit compiled (C loop)", "AdamW8bit compiled (torch.compile)"


def judged_row(names) -> str:
    """The 8-bit row the target judges: what AdamW8bit(compile=True) runs here (the C loop on a CPU that builds it),
    else eager."""
    return next((name for name in (C_LOOP, INDUCTOR) if name in names), "AdamW8bit")


def c_loop_build_seconds() -> float | None:
    """Seconds to build the C loop from scratch (into a temporary folder; AdamW8bit's own build is cached on disk,
    so it is paid once per machine), or None where it cannot be built."""
    if kernel_unavailable():
        return None
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        kernel.build(kernel.c_compiler(), Path(folder) / "adamw8bit.so")
        return time.perf_counter() - start


def can_compile(device: torch.device) -> bool:
    """Whether torch.compile can work here (minigpt.device.check_compile: a C++ compiler on a CPU, not an Apple GPU)."""
    try:
        check_compile(device)
    except ValueError:
        return False
    return True


def real_gradients(preset: str, data: TokenData, device: torch.device) -> tuple[list, list]:
    """A model's parameters and the gradients of one fp32 batch (8 x 128) of the training data."""
    cfg = TrainConfig(preset=preset, device=str(device))
    model = build_step_state(get_config(preset), cfg, device).model
    ctx = min(128, model.cfg.ctx)
    x, y = data.get_batch("train", 8, ctx, torch.Generator().manual_seed(0))
    forward_backward(model, [(x.to(device), y.to(device))], device, "fp32")
    params = list(model.parameters())
    return [p.detach() for p in params], [p.grad for p in params]


def on_copies(make, params: list[torch.Tensor], grads: list[torch.Tensor]) -> torch.optim.Optimizer:
    """make(...) over fresh copies of `params` whose gradients are `grads` (the same tensors for every optimizer)."""
    copies = [torch.nn.Parameter(p.clone()) for p in params]
    for copy, grad in zip(copies, grads):
        copy.grad = grad
    return make(copies)


def optimizer_step_times(preset: str, rounds: int, device: torch.device, data: TokenData) -> tuple[dict, dict, dict]:
    """Seconds of optimizer.step() alone on a model's parameters: fused AdamW and AdamW8bit, eager and compiled
    (and torchao's), taking turns on the same real gradients; their state bytes; and the seconds of each one's
    first step, which makes the state and compiles (untimed as a step: the compile time is its own column)."""
    params, grads = real_gradients(preset, data, device)
    makers = [("fused AdamW", lambda ps: torch.optim.AdamW(ps, fused=True)), ("AdamW8bit", lambda ps: AdamW8bit(ps))]
    if device.type == "cpu" and kernel_unavailable() is None:
        makers.append((C_LOOP, lambda ps: AdamW8bit(ps, compile=True, kernel="c")))
    if can_compile(device):
        makers.append((INDUCTOR, lambda ps: AdamW8bit(ps, compile=True, kernel="inductor")))
    optimizers = {name: on_copies(make, params, grads) for name, make in (*makers, *reference_optimizer())}
    times, first = {name: [] for name in optimizers}, {}
    for turn in range(rounds + 1):
        for name, opt in optimizers.items():
            start = clock(device)
            opt.step()
            if turn:
                times[name].append(clock(device) - start)
            else:
                first[name] = clock(device) - start
    states = {name: state_bytes(opt) for name, opt in optimizers.items()}
    return times, states, first


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in the optimizer's state (torchao's subclasses: the tensors they are made of)."""
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if not torch.is_tensor(value):
                continue
            if hasattr(value, "__tensor_flatten__"):  # a tensor subclass: codes and scales inside
                names, _ = value.__tensor_flatten__()
                total += sum(getattr(value, n).untyped_storage().nbytes() for n in names)
            else:
                total += value.untyped_storage().nbytes()
    return total


def reference_optimizer() -> list[tuple[str, object]]:
    """torchao's AdamW8bit where torchao is installed (pip install torchao), else nothing."""
    try:
        from torchao.optim import AdamW8bit as TorchaoAdamW8bit
    except ImportError:
        return []
    return [("torchao AdamW8bit", lambda ps: TorchaoAdamW8bit(ps))]


def reference_losses(steps: int, preset: str, data: TokenData, device: torch.device) -> dict[str, float]:
    """The train loss after `steps` steps of the same batches with each optimizer (fp32, batch 8 x 128)."""
    losses = {}
    for name, make in (("AdamW", None), ("AdamW8bit", None), *reference_optimizer()):
        cfg = TrainConfig(preset=preset, batch=8, ctx=min(128, get_config(preset).ctx), steps=steps, device=str(device))
        if name == "AdamW8bit":
            cfg = TrainConfig(**{**cfg.__dict__, "optimizer": "adamw8bit"})
        state = build_step_state(get_config(preset), cfg, device)
        if make is not None:  # the reference: the same schedule on torchao's optimizer
            state.optimizer = make(list(state.model.parameters()))
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(state.optimizer, state.scheduler.lr_lambdas[0])
        gen = torch.Generator().manual_seed(0)
        for _ in range(steps):
            x, y = data.get_batch("train", cfg.batch, cfg.ctx, gen)
            record = train_step(state, [(x, y)], device, cfg.precision, cfg.grad_clip)
        losses[name] = record["loss"]
    return losses


def both_sides(pred, meas, moment: str) -> str:
    """'predicted / measured' MiB at one moment of the step."""
    return f"{pred.moments[moment] / MIB:,.0f} / {meas.moments[moment] / MIB:,.0f}"


def gradient_checks(preset: str, breakdowns: dict) -> list[Check]:
    """The step in backward frees the whole-model gradient: at the optimizer step all of AdamW's gradient term is
    gone; at the end of backward all but the embedding's (the largest single gradient, alive in its own hook).
    Judged at 90% of that, predicted and measured."""
    base, lever, checks = breakdowns["AdamW"], breakdowns["in backward"], []
    whole, largest = base["predicted"].gradients, lever["predicted"].gradients
    for moment, expected in (("backward: embedding", whole - largest), ("optimizer", whole)):
        gone = [base[side].moments[moment] - lever[side].moments[moment] for side in ("predicted", "measured")]
        checks.append(
            Check(
                f"{preset} in backward: at {moment}, the gradient bytes gone (predicted, measured) >= 90% of "
                f"{expected / MIB:,.1f} MiB",
                f"{gone[0] / MIB:,.1f}, {gone[1] / MIB:,.1f} MiB",
                min(gone) >= 0.9 * expected,
            )
        )
    return checks


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), size_for(SIZES, device, quick)
    data = data or token_data(quick)
    rows, checks, plot = [], [], []
    for model in size["models"]:
        if "warmup" not in model:
            model = {**model, "warmup": size["big_steps"][0], "steps": size["big_steps"][1]}
        print(f"{model['preset']}: memory of each configuration, then step times", flush=True)
        breakdowns = memory_rows(model, device)
        times = interleaved_step_times(model, data, device)
        for name in CONFIGS:
            pred, meas = breakdowns[name]["predicted"], breakdowns[name]["measured"]
            ratio, spread = median_spread([t / t0 for t, t0 in zip(times[name], times["AdamW"])])
            error = (meas.peak - pred.peak) / pred.peak
            rows.append(
                [
                    model["preset"],
                    name,
                    f"{pred.peak / MIB:,.0f}",
                    f"{meas.peak / MIB:,.0f}",
                    f"{100 * error:+.2f}",
                    f"{pred.optimizer / MIB:,.1f}",
                    f"{pred.gradients / MIB:,.1f}",
                    both_sides(pred, meas, "backward: embedding"),
                    both_sides(pred, meas, "optimizer"),
                    f"{median_spread(times[name])[0]:.3f}",
                    f"{ratio:.3f} ({spread:.0f}%)",
                ]
            )
            plot.append((model["preset"], name, pred, meas, ratio))
            checks.append(
                Check(
                    f"{model['preset']} {name}: measured peak within {MEASURED_WITHIN:.0%} of predicted",
                    f"{100 * error:+.2f}%",
                    abs(error) <= MEASURED_WITHIN,
                )
            )
            if name == "in backward":
                checks.append(
                    Check(
                        f"{model['preset']} in backward: step time <= {MAX_IN_BACKWARD_TIME}x AdamW's",
                        f"{ratio:.3f}x (spread {spread:.0f}%)",
                        ratio <= MAX_IN_BACKWARD_TIME,
                    )
                )
                checks += gradient_checks(model["preset"], breakdowns)
        if model["preset"] == "125m":
            eight = breakdowns["8-bit"]["predicted"]
            checks.append(
                Check(
                    "125m 8-bit: predicted peak <= 2,060 MiB (AdamW: "
                    f"{breakdowns['AdamW']['predicted'].peak / MIB:,.0f} MiB)",
                    f"{eight.peak / MIB:,.0f} MiB, moments {eight.optimizer / MIB:,.0f} MiB",
                    eight.peak <= PEAK_125M_8BIT,
                )
            )

    step_rows = []
    for preset, rounds in size["optimizer_rounds"].items():
        print(f"the optimizer step alone: {preset}", flush=True)
        step_times, states, first = optimizer_step_times(preset, rounds, device, data)
        fused = median_spread(step_times["fused AdamW"])[0]
        step_rows += [
            [
                preset,
                name,
                f"{median_spread(ts)[0] * 1000:.1f}",
                f"{median_spread(ts)[0] / fused:.2f}",
                f"{states[name] / MIB:.1f}",
                f"{first[name]:.1f}",
            ]
            for name, ts in step_times.items()
        ]
        judged = judged_row(step_times)
        eight_ratio = median_spread(step_times[judged])[0] / fused
        checks.append(
            Check(
                f"{preset} {judged}'s step <= {MAX_8BIT_STEP}x fused AdamW's ({device.type})",
                f"{eight_ratio:.2f}x",
                eight_ratio <= MAX_8BIT_STEP,
            )
        )
    reference = reference_losses(size["reference_steps"], size["reference_preset"], data, device)
    note = (
        "torchao is not installed (pip install -e '.[bench]'): the reference rows are left out."
        if "torchao AdamW8bit" not in states
        else "torchao.optim.AdamW8bit is the reference."
    )
    build = c_loop_build_seconds() if device.type == "cpu" else None
    if build is not None:
        note += f" Building the C loop (cc, once per machine, then cached on disk) took {build:.1f} s."
    body = "\n\n".join(
        [
            __doc__.split("\n\n")[1].replace("\n", " "),
            table(
                rows,
                [
                    "preset",
                    "config",
                    "predicted peak MiB",
                    "measured MiB",
                    "error %",
                    "moments MiB",
                    "gradients MiB",
                    "end of backward MiB (pred / meas)",
                    "optimizer step MiB (pred / meas)",
                    "s/step",
                    "time ratio (spread)",
                ],
            ),
            "The optimizer step alone on each preset's parameters (fp32), the same real gradients (one batch), "
            "the optimizers taking turns; state: every tensor the optimizer keeps; first step: the untimed one that "
            "makes the state and, for torch.compile's pass, compiles.",
            table(step_rows, ["preset", "optimizer", "ms/step", "x fused AdamW", "state MiB", "first step s"]),
            f"Train loss after {size['reference_steps']} steps of the same batches: "
            + ", ".join(f"{k} {v:.4f}" for k, v in reference.items())
            + ". "
            + note,
        ]
    )
    plt = pyplot()
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(10, 3.6))
    labels = [f"{preset}\n{name}" for preset, name, *_ in plot]
    xs = range(len(plot))
    ax_m.bar([x - 0.2 for x in xs], [p[2].peak / MIB for p in plot], 0.4, label="predicted", color="#0072B2")
    ax_m.bar([x + 0.2 for x in xs], [p[3].peak / MIB for p in plot], 0.4, label="measured", color="#E69F00")
    ax_m.set_xticks(list(xs), labels, fontsize=7)
    ax_m.set_ylabel("peak MiB")
    ax_m.legend()
    ax_t.bar(list(xs), [p[4] for p in plot], color="#009E73")
    ax_t.axhline(MAX_IN_BACKWARD_TIME, color="tab:red", linestyle=":", linewidth=1)
    ax_t.set_xticks(list(xs), labels, fontsize=7)
    ax_t.set_ylabel("step time / AdamW's")
    figure = save_figure(fig, out, "optimizers.png")
    return Section("9. The optimizer state and the gradients", body, checks, [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
