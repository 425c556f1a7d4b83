"""Plan for a memory budget instead of a catalogued GPU: every lever the engine has, the fastest set that fits.

The budget is the whole process (minigpt.budget): on a CPU the runtime's own resident memory comes first,
then the step's peak as minigpt.memory predicts it. The levers: precision (and fp32 master weights), the
8-bit AdamW, the optimizer step in backward, gradient checkpointing, the chunked loss and activation
offloading; the micro-batch is given. Among the sets that fit, the plan takes the one with the fewest
predicted seconds per step (minigpt.step_time) and says, for every lever it leaves out, why.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from dataclasses import asdict, dataclass, field

import torch

from minigpt import memory
from minigpt.budget import MALLOC_SETTING, build_runtime_bytes, measure_runtime_baselines, runtime_baseline_bytes
from minigpt.calibrate import calibration, offload_round_trip
from minigpt.model import GPT, PRESETS, ModelConfig, count_params, shaped_config
from minigpt.precision import precision_problem, probe_precision
from minigpt.recompute import CHECKPOINTING_MODES
from minigpt.step_time import Calibration, step_seconds
from minigpt.timing import clock

MIB = 2**20
LOSS_CHUNKS = 8  # what the planner asks of --loss-chunks: the head's (tokens x vocabulary) buffers / 8
# A plan fills the budget only up to 1 - this: the prediction does not see allocator rounding or the caches of
# libraries, which benchmarks/bench_largest.py measured at a few percent of a small process (less of a large one).
PREDICTION_MARGIN = 0.05


@dataclass(frozen=True)
class Levers:
    """One set of memory levers, named like TrainConfig's fields (and so like `minigpt train`'s flags)."""

    precision: str = "fp32"
    master_weights: bool = False
    optimizer: str = "adamw"
    optimizer_in_backward: bool = False
    checkpointing: str = "none"
    loss_chunks: int = 1
    offload_activations: bool = False
    lora_rank: int | None = None  # fine-tuning only: rank-R adapters on a frozen base (None: train every weight)
    base_dtype: str = "fp32"  # LoRA: how the frozen base is stored

    def flags(self) -> list[str]:
        """The `minigpt train` flags that turn these levers on (the defaults left out)."""
        out = ["--precision", self.precision]
        out += ["--master-weights"] if self.master_weights else []
        out += ["--optimizer", self.optimizer] if self.optimizer != "adamw" else []
        # the step in backward frees each gradient at once, so a global-norm clip (which needs them all) is off
        out += ["--optimizer-in-backward", "--grad-clip", "0"] if self.optimizer_in_backward else []
        out += ["--checkpointing", self.checkpointing] if self.checkpointing != "none" else []
        out += ["--loss-chunks", str(self.loss_chunks)] if self.loss_chunks > 1 else []
        out += ["--offload-activations"] if self.offload_activations else []
        out += ["--lora-rank", str(self.lora_rank), "--base-dtype", self.base_dtype] if self.lora_rank else []
        return out


NO_LEVERS = Levers()  # fp32 AdamW, nothing else: what a first training script does
TIE = 0.01  # predicted step times within 1% of the fastest count as a tie


def changes_the_result(levers: Levers) -> bool:
    """Whether these levers train a different model than fp32-faithful AdamW would (beyond rounding): the step in
    backward turns gradient clipping off, 8-bit moments are approximate, LoRA trains adapters only."""
    return levers.optimizer_in_backward or levers.optimizer != "adamw" or levers.lora_rank is not None


def supported_precisions(device: torch.device) -> list[str]:
    """The precisions this device runs natively (chapter 4's rule: never plan an emulated or missing one)."""
    return [p for p in ("fp32", "bf16", "fp16", "bf16-pure") if precision_problem(probe_precision(device, p)) is None]


LORA_RANK = 8  # what the planner asks of --lora-rank when fine-tuning: Hu et al. 2021's small ranks


def all_levers(precisions: list[str], fine_tune: bool = False) -> list[Levers]:
    """Every combination the engine can run. bf16-pure without master weights is left out: without stochastic
    rounding it loses every update smaller than half a bf16 step (chapter 1's lost update).

    fine_tune: also LoRA (rank LORA_RANK) on each base dtype, with AdamW, in every checkpointing mode, with and
    without the chunked loss (the levers minigpt.memory predicts for a LoRA step).
    """
    combos = []
    for precision, optimizer, in_backward, mode, chunks, offload in itertools.product(
        precisions, ("adamw", "adamw8bit"), (False, True), CHECKPOINTING_MODES, (1, LOSS_CHUNKS), (False, True)
    ):
        if precision == "fp16" and in_backward:
            continue  # the GradScaler must see every gradient before any step: the engine refuses the pair
        combos.append(Levers(precision, precision == "bf16-pure", optimizer, in_backward, mode, chunks, offload))
    if fine_tune:
        bases = [b for b in ("fp32", "bf16", "int8", "nf4") if b != "bf16" or "bf16" in precisions]
        lora_precisions = [p for p in precisions if p != "bf16-pure"]
        for precision, base, mode, chunks in itertools.product(
            lora_precisions, bases, CHECKPOINTING_MODES, (1, LOSS_CHUNKS)
        ):
            combos.append(
                Levers(precision, checkpointing=mode, loss_chunks=chunks, lora_rank=LORA_RANK, base_dtype=base)
            )
    return combos


@functools.cache
def measure_rates(device_type: str = "cpu", n: int | None = None) -> dict[str, float]:
    """Matmul FLOP/s per precision and the offload path's bytes/s on this device (measured once, cached).

    The planner itself times whole steps (minigpt.calibrate); these two rates are what chapter 9 quotes.

    Offload on a CPU writes files and reads them back, as --offload-activations does; on CUDA it copies to
    pinned host memory and back. n: the matmul's size (a GPU needs a large one, else it times kernel launches).
    """
    device = torch.device(device_type)
    n = n or (4096 if device.type == "cuda" else 512)
    rates = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        a = torch.ones(n, n, dtype=dtype, device=device)
        a @ a  # the first call may pick or load a kernel
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            a @ a
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best = min(best, time.perf_counter() - t0)
        rates[name] = 2 * n**3 / max(best, 1e-9)
    rates["offload"] = _offload_bytes_per_second(device)
    return rates


def _offload_bytes_per_second(device: torch.device, n_bytes: int = 64 * MIB) -> float:
    """Bytes per second of one round trip out and back (minigpt.calibrate.offload_round_trip), timed once."""
    run = offload_round_trip(device, n_bytes)
    t0 = clock(device)
    run()
    return 2 * n_bytes / max(clock(device) - t0, 1e-9)


@dataclass
class BudgetPlan:
    """A planned run for a budget: the levers, the predicted peak of the process, and the reasons."""

    model: ModelConfig
    ctx: int
    batch: int
    budget_bytes: int
    runtime_bytes: int  # the process before any tensor: interpreter, torch (0 on a GPU: its own memory)
    levers: Levers | None  # None: nothing fits
    breakdown: memory.MemoryBreakdown | None
    seconds: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    name: str = ""  # the preset, or a description of the shape
    timing: str = ""  # where the step times' rates came from (minigpt.calibrate)
    candidates: list[Levers] = field(default_factory=list)  # every set that fits, fastest predicted first
    build_bytes: int = 0  # the process while train() builds the model in fp32, before any lever casts it

    @property
    def fits(self) -> bool:
        return self.levers is not None

    @property
    def predicted_process_bytes(self) -> int:
        """What the whole process holds at its worst moment: the runtime plus the step's tensors at the step's
        worst moment, or the fp32 model as it is built (build_bytes), whichever is larger."""
        return max(self.runtime_bytes + (self.breakdown.peak if self.breakdown else 0), self.build_bytes)

    def command(self, steps: int = 5, device: str = "cpu") -> str:
        """The `minigpt train` command that runs this plan: its preset (125m for a family model), reshaped."""
        preset = self.name if self.name in PRESETS else "125m"
        base, m = PRESETS[preset], self.model
        shape = ["--preset", preset]
        for flag, value, preset_value in (
            ("--n-layer", m.n_layer, base.n_layer),
            ("--n-embd", m.n_embd, base.n_embd),
            ("--n-head", m.n_head, base.n_head),
        ):
            shape += [flag, str(value)] if value != preset_value else []
        levers = self.levers.flags() if self.levers else []
        flags = [*shape, "--batch", str(self.batch), "--ctx", str(self.ctx), *levers, "--steps", str(steps)]
        malloc = [f"{k}={v}" for k, v in MALLOC_SETTING.items()] if device == "cpu" else []
        return " ".join([*malloc, "minigpt", "train", *flags, "--device", device])

    def to_dict(self) -> dict:
        return {
            "model": self.model.to_dict(),
            "params": count_params(self.model),
            "ctx": self.ctx,
            "batch": self.batch,
            "budget_bytes": self.budget_bytes,
            "runtime_bytes": self.runtime_bytes,
            "levers": asdict(self.levers) if self.levers else None,
            "predicted_process_bytes": self.predicted_process_bytes,
            "breakdown": self.breakdown.to_dict() if self.breakdown else None,
            "seconds": self.seconds,
            "timing": self.timing,
            "reasons": self.reasons,
            "fits": self.fits,
        }


def predict(model: ModelConfig, batch: int, ctx: int, levers: Levers, device: str) -> memory.MemoryBreakdown:
    """memory.estimate of one step with these levers."""
    return memory.estimate(
        model,
        batch,
        ctx,
        precision=levers.precision,
        checkpointing=levers.checkpointing,
        master_weights=levers.master_weights,
        device=device,
        optimizer=levers.optimizer,
        optimizer_in_backward=levers.optimizer_in_backward,
        loss_chunks=levers.loss_chunks,
        offload_activations=levers.offload_activations,
        lora_rank=levers.lora_rank,
        base_dtype=levers.base_dtype,
    )


def predicted_seconds(
    model: ModelConfig, batch: int, ctx: int, levers: Levers, est, cal: Calibration
) -> dict[str, float]:
    """step_seconds of these levers at the calibrated rates."""
    offloaded = getattr(est, "offloaded", 0) or 0
    return step_seconds(
        model,
        batch * ctx,
        ctx,
        count_params(model),
        cal,
        levers.precision,
        levers.checkpointing,
        levers.optimizer,
        levers.loss_chunks,
        offloaded,
        levers.base_dtype if levers.lora_rank else None,
        est.optimizer // 8 if levers.lora_rank else None,  # LoRA: AdamW's 8 bytes per trained parameter
    )


LEVER_NAMES = {
    "precision": "precision",
    "optimizer": "8-bit AdamW (--optimizer adamw8bit)",
    "optimizer_in_backward": "the step in backward (--optimizer-in-backward)",
    "checkpointing": "checkpointing",
    "loss_chunks": f"the chunked loss (--loss-chunks {LOSS_CHUNKS})",
    "offload_activations": "offloading (--offload-activations)",
    "lora_rank": f"LoRA (--lora-rank {LORA_RANK})",
    "base_dtype": "a frozen base in",
}


def model_build_bytes(model: ModelConfig) -> int:
    """What building `model` holds at its worst: every parameter in fp32 (GPT's seeded init, before a lever casts
    or quantizes it), plus the init's two temporaries of one parameter (torch.randn, then times the std).

    A linear's own storage is already written by nn.Linear's init, so its two temporaries come on top; the
    embedding's is still untouched (not resident) while its two are made, so only one of them counts."""
    with torch.device("meta"):  # shapes only: nothing is allocated
        sizes = {name: p.numel() for name, p in GPT(model, seed=None).named_parameters()}
    embedding = sizes.pop("tok_emb.weight")
    return 4 * (embedding + sum(sizes.values())) + 4 * max(embedding, 2 * max(sizes.values()))


def plan_for_budget(
    model: ModelConfig,
    budget_bytes: int,
    ctx: int,
    batch: int = 1,
    device_type: str = "cpu",
    runtime_bytes: int | None = None,
    cal: Calibration | None = None,
    choices: list[Levers] | None = None,
    name: str = "",
) -> BudgetPlan:
    """The fastest set of levers whose predicted process peak fits `budget_bytes`; levers None if none fits.

    runtime_bytes: what the process holds before any tensor (default: measured on a CPU, 0 on a GPU, whose
    budget is its own memory). cal: the device's cached calibration (minigpt.calibrate) unless given.
    """
    if budget_bytes < 1 or batch < 1 or ctx < 1:
        raise ValueError(f"budget, batch and ctx must be positive, got {budget_bytes}, {batch}, {ctx}")
    cal = cal or calibration(device_type)
    choices = choices or all_levers(supported_precisions(torch.device(device_type)))

    if runtime_bytes is None and device_type == "cpu":
        measure_runtime_baselines([lv.precision for lv in choices])  # side by side, once per process

    def runtime(levers: Levers) -> int:  # the runtime's own memory, with the kernels of this precision loaded
        if runtime_bytes is not None:
            return runtime_bytes
        return runtime_baseline_bytes(levers.precision) if device_type == "cpu" else 0

    # train() builds the model in fp32 first: with a frozen 16-bit or quantized base, that can be the peak
    built = runtime_bytes if runtime_bytes is not None else build_runtime_bytes() if device_type == "cpu" else 0
    built += model_build_bytes(model)
    scored = []  # (seconds, process peak, levers, estimate, seconds by part)
    for levers in choices:
        est = predict(model, batch, ctx, levers, device_type)
        seconds = predicted_seconds(model, batch, ctx, levers, est, cal)
        scored.append((sum(seconds.values()), max(runtime(levers) + est.peak, built), levers, est, seconds))
    fill = int(budget_bytes * (1 - PREDICTION_MARGIN))  # what the predicted process peak may reach
    fitting = [s for s in scored if s[1] <= fill]
    plan = BudgetPlan(model, ctx, batch, budget_bytes, 0, None, None, name=name, timing=cal.describe())
    plan.build_bytes = built
    if not fitting:
        _, peak, levers, est, seconds = min(scored, key=lambda s: s[1])
        plan.breakdown, plan.seconds, plan.runtime_bytes = est, seconds, runtime(levers)
        plan.reasons.append(
            f"nothing fits: the smallest predicted process peak is {peak / MIB:,.0f} MiB ({' '.join(levers.flags())}),"
            f" above {fill / MIB:,.0f} MiB ({1 - PREDICTION_MARGIN:.0%} of the budget)"
        )
        return plan
    # The fastest; at a tie (within TIE), a set that trains the same model first: a lever that changes the result
    # (no gradient clipping, 8-bit moments, adapters instead of every weight) is chosen only for speed or to fit.
    plan.candidates = [s[2] for s in sorted(fitting, key=lambda s: s[0])]
    fastest = min(s[0] for s in fitting)
    _, _, plan.levers, plan.breakdown, plan.seconds = min(
        fitting, key=lambda s: (s[0] > fastest * (1 + TIE), changes_the_result(s[2]), s[0], s[1])
    )
    plan.runtime_bytes = runtime(plan.levers)
    if plan.runtime_bytes:
        plan.reasons.append(
            f"budget {budget_bytes / MIB:,.0f} MiB for the whole process, filled to {1 - PREDICTION_MARGIN:.0%}: the "
            f"runtime holds {plan.runtime_bytes / MIB:,.0f} MiB before the model's tensors (measured, "
            f"{plan.levers.precision})"
        )
    if built > plan.runtime_bytes + plan.breakdown.peak:
        plan.reasons.append(
            f"the peak is building the model, not the step: train() makes every weight in fp32 (its seeded init) "
            f"before the levers cast or quantize it, {built / MIB:,.0f} MiB with the runtime"
        )
    plan.reasons += _why_each_lever(plan.levers, scored, fill)
    if any(lv.precision == "bf16-pure" for lv in choices):
        plan.reasons.append(
            "never bf16-pure without --master-weights: with bf16 weights and no fp32 copy, every update smaller "
            "than half a bf16 step is lost (chapter 1's lost update), and this engine has no stochastic rounding"
        )
    return plan


def _why_each_lever(best: Levers, scored: list[tuple], budget: int) -> list[str]:
    """For each lever: why it is on (without it nothing fits, or it is faster) or off (it is not needed)."""
    best_seconds = next(s[0] for s in scored if s[2] == best)
    reasons = []
    for attr, label in LEVER_NAMES.items():
        chosen = getattr(best, attr)
        for other in sorted({getattr(s[2], attr) for s in scored} - {chosen}, key=str):
            alternatives = [s for s in scored if getattr(s[2], attr) == other]
            fit = [s for s in alternatives if s[1] <= budget]
            categorical = attr in ("precision", "checkpointing", "base_dtype")
            what = f"{label} {other}" if categorical else label
            verb = "with" if categorical or other != getattr(NO_LEVERS, attr) else "without"
            if not fit:
                smallest = min(alternatives, key=lambda s: s[1])[1]
                reasons.append(f"{verb} {what}: nothing fits (smallest process peak {smallest / MIB:,.0f} MiB)")
            else:
                fastest = min(fit, key=lambda s: s[0])[0]
                reasons.append(
                    f"{verb} {what}: it fits, but the fastest such plan is predicted at "
                    f"{fastest / best_seconds:.2f}x the time"
                )
    return reasons


def family_model(k: int) -> ModelConfig:
    """Model k of the course family: the 125m preset reshaped to k blocks of width 64 k, with k heads of 64.

    (125m's head size, and GPT-2 small's aspect of width 64 per block; k = 12 is 91M parameters, k = 28 is 1.1B.)
    """
    return shaped_config("125m", n_layer=k, n_embd=64 * k, n_head=k)


def largest(
    budget_bytes: int,
    ctx: int = 256,
    batch: int = 1,
    device_type: str = "cpu",
    choices: list[Levers] | None = None,
    runtime_bytes: int | None = None,
    cal: Calibration | None = None,
) -> BudgetPlan:
    """The plan of the largest family model (family_model(k)) that trains within the budget: a binary search.

    Memory grows with k, so the fitting k form a prefix 1..K; ValueError if even k = 1 does not fit, naming
    the smallest budget that would.
    """
    cal = cal or calibration(device_type)
    plans: dict[int, BudgetPlan] = {}  # k -> its plan: the search asks for some k more than once

    def plan_k(k: int) -> BudgetPlan:
        if k not in plans:
            plans[k] = plan_for_budget(
                family_model(k), budget_bytes, ctx, batch, device_type, runtime_bytes, cal, choices, f"family k={k}"
            )
        return plans[k]

    first = plan_k(1)
    if not first.fits:
        need = math.ceil(first.predicted_process_bytes / (1 - PREDICTION_MARGIN) / MIB) * MIB  # with the margin
        raise ValueError(
            f"no model of the family fits {budget_bytes / MIB:,.0f} MiB: the smallest (1 block of width 64) "
            f"needs about {need / MIB:,.0f} MiB with its best levers; give --budget {need / MIB:,.0f}MiB or more"
        )
    lo, hi = 1, 2
    while plan_k(hi).fits:  # double until one does not fit
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # the largest fitting k lies in [lo, hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if plan_k(mid).fits else (lo, mid)
    return plan_k(lo)
