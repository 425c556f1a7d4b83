"""Plan a training run for the memory you have: precision, micro-batch, accumulation and checkpointing.

The planner asks minigpt.memory for the predicted peak of one training step and makes four decisions:
  1. precision: bf16 autocast where the hardware runs it natively, else fp16 with a GradScaler (T4, V100),
     else fp32 (a CPU without bf16 instructions);
  2. micro-batch: the largest divisor of the effective batch whose predicted peak fits, so that
     accum = effective_batch / micro_batch exactly;
  3. checkpointing: only when even micro-batch 1 does not fit, and then the cheapest mode that fits;
  4. when nothing fits: a Plan with fits=False and a `lever` sentence saying what would make it fit.
Over several GPUs (gpus=N, shard none | zero1 | fsdp) the plan is per GPU: each takes effective_batch / N
sequences per step, and its static memory is split as the shard mode says (memory.sharded_estimate).
Sizes print in GiB (see minigpt.hardware); minigpt.batch_search checks a plan against real training steps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from minigpt import memory
from minigpt.divisors import micro_batch_candidates
from minigpt.hardware import GIB, Hardware, choose_precision, get_hardware, gib
from minigpt.model import COURSE_PRESETS, PRESETS, ModelConfig, count_params
from minigpt.parallel import check_shard_mode
from minigpt.precision import static_bytes_per_param
from minigpt.recompute import CHECKPOINTING_MODES
from minigpt.step_time import (  # noqa: F401 - re-exported: chapters import them from here
    SELECTIVE_RECOMPUTE_SHARE,
    forward_flops_per_token,
    relative_step_time,
)

# Models too large for one GPU, to plan only (nobody trains them in this course): this architecture (tied
# embedding, SwiGLU 8/3 wide, RMSNorm, RoPE) at Llama 2 7B's shape, 32 layers of width 4096 with a 32000-token
# vocabulary: 6.6B parameters.
LARGE_MODELS: dict[str, ModelConfig] = {
    "7b": ModelConfig(n_layer=32, n_head=32, n_embd=4096, ctx=4096, vocab_size=32000)
}
PLAN_MODELS: dict[str, ModelConfig] = {**PRESETS, **LARGE_MODELS}

# ----------------------------------------------------------------------------------------------------------
# The plan

Predictor = Callable[..., memory.MemoryBreakdown]  # predict(batch, ctx, checkpointing=mode)


@dataclass
class Plan:
    """A planned run: the choices, the predicted peak, and the reasons behind each choice."""

    preset: str
    hardware: Hardware
    ctx: int
    effective_batch: int
    precision: str
    use_scaler: bool
    micro_batch: int  # when fits is False: the closest attempt (micro-batch 1, the most saving mode)
    accum: int
    checkpointing: str
    predicted_peak_bytes: int
    usable_bytes: int  # memory the plan may fill: the usable memory minus headroom
    relative_step_time: float
    fits: bool
    reasons: list[str] = field(default_factory=list)
    lever: str | None = None  # what would make it fit (None when it fits)
    breakdown: memory.MemoryBreakdown | None = None  # the estimate behind predicted_peak_bytes (per GPU)
    gpus: int = 1  # data-parallel GPUs; micro_batch and the memory are per GPU
    shard: str = "none"  # what the GPUs split: none (DDP), zero1 (AdamW's state) or fsdp (all static state)
    optimizer: str = "adamw"  # or adamw8bit (about 2 bytes of moments a parameter instead of 8)

    @property
    def precision_label(self) -> str:
        return self.precision + (" + GradScaler" if self.use_scaler else "")

    def explain(self) -> str:
        """The plan as text: the choices, then why each was made (and the lever, if it does not fit)."""
        b = self.breakdown
        worst = max(b.moments, key=b.moments.get) if b is not None and getattr(b, "moments", None) else None
        many = self.gpus > 1
        on = f"{self.gpus} x {self.hardware.name}" if many else self.hardware.name
        devices = f"{self.gpus} GPUs" if many else "1 device"
        per_gpu = " per GPU" if many else ""
        size = f"{gib(self.hardware.memory_bytes)} each" if many else gib(self.hardware.memory_bytes)
        lines = [
            f"Plan: {self.preset} at ctx {self.ctx}, effective batch {self.effective_batch}, on {on} ({size})"
            + ("" if self.fits else "  -- DOES NOT FIT"),
            f"  precision       {self.precision_label}" + ("" if self.optimizer == "adamw" else f", {self.optimizer}"),
            *([f"  shard           {self.shard} over {self.gpus} GPUs"] if many else []),
            f"  micro-batch     {self.micro_batch}{per_gpu}",
            f"  accum           {self.accum}  ({self.micro_batch} x {self.accum} x {devices} = "
            f"{self.micro_batch * self.accum * self.gpus} sequences per optimizer step)",
            f"  checkpointing   {self.checkpointing}",
            f"  predicted peak  {gib(self.predicted_peak_bytes)}{per_gpu} of {gib(self.usable_bytes)} usable"
            + (f" (worst moment: {worst})" if worst else ""),
        ]
        if b is not None:
            lines.append(
                f"  static          {gib(b.static)}{per_gpu} = weights {gib(b.weights)} + grads "
                f"{gib(b.gradients)} + AdamW m, v {gib(b.optimizer)}"
            )
            lines.append(
                f"  per step        activations {gib(b.activations)}, logits {gib(b.logits)}, "
                f"backward's gradients {gib(b.activation_grads)}, autocast weight copies "
                f"{gib(b.weight_copies)}, AdamW step {gib(b.optimizer_step)} "
                f"(each at its own worst moment)"
            )
        lines.append(f"  step time       {self.relative_step_time:.2f}x a step without checkpointing")
        lines.append("Why:")
        lines += [f"  - {r}" for r in self.reasons]
        if self.lever:
            lines.append(f"What would make it fit: {self.lever}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Plain data (for JSON): every field, with the hardware and the memory breakdown as dicts."""
        return {**asdict(self), "breakdown": self.breakdown.to_dict() if self.breakdown else None}


def _largest_micro_batch(
    predict: Predictor, ctx: int, candidates: list[int], mode: str, budget: int
) -> tuple[int, memory.MemoryBreakdown | None]:
    """The largest candidate (ascending list) whose predicted peak fits in `budget`, with its estimate.

    The peak grows with the batch, so this is a binary search; (0, None) when even the smallest does not fit.
    """
    lo, hi, best = 0, len(candidates) - 1, (0, None)
    while lo <= hi:
        mid = (lo + hi) // 2
        est = predict(candidates[mid], ctx, checkpointing=mode)
        if est.peak <= budget:
            best, lo = (candidates[mid], est), mid + 1
        else:
            hi = mid - 1
    return best


def _check_inputs(preset: str, ctx: int, effective_batch: int, headroom: float) -> ModelConfig:
    if preset not in PLAN_MODELS:
        raise ValueError(f"unknown preset {preset!r}; choose one of: {', '.join(PLAN_MODELS)}")
    cfg = PLAN_MODELS[preset]
    if not 1 <= ctx <= cfg.ctx:
        raise ValueError(f"ctx must be between 1 and the {preset} preset's maximum of {cfg.ctx}, got {ctx}")
    if effective_batch < 1:
        raise ValueError(f"effective_batch must be at least 1 sequence, got {effective_batch}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom is the fraction of memory kept free, in [0, 1); got {headroom}")
    return cfg


def plan(
    preset: str,
    hardware: str | Hardware,
    ctx: int,
    effective_batch: int,
    headroom: float = 0.1,
    memory_bytes: int | None = None,
    gpus: int = 1,
    shard: str = "none",
    optimizer: str = "adamw",
) -> Plan:
    """Choose precision, micro-batch, accumulation and checkpointing for `preset` on `hardware`.

    memory_bytes replaces the hardware's memory (for mps and cpu: the RAM). With gpus > 1 the plan is per GPU:
    each takes effective_batch / gpus sequences per step and holds the static state as `shard` splits it.
    Never raises for "does not fit": that is a Plan with fits=False and a lever; bad input raises ValueError.
    """
    cfg = _check_inputs(preset, ctx, effective_batch, headroom)
    check_shard_mode(shard)
    if gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {gpus}")
    if effective_batch % gpus:
        raise ValueError(
            f"the effective batch ({effective_batch}) must be a multiple of --gpus ({gpus}): each GPU takes an "
            "equal share of every step"
        )
    hw = get_hardware(hardware)
    has = f"the {hw.name} has {gib(hw.memory_bytes)}"
    if memory_bytes is not None:
        if memory_bytes <= 0:
            raise ValueError(f"memory_bytes must be positive, got {memory_bytes}")
        hw = replace(hw, memory_bytes=int(memory_bytes))
        has = f"this plan is given a budget of {gib(hw.memory_bytes)} ({has})"
    usable = int(hw.usable_memory_bytes * (1 - headroom))
    precision, precision_reason = choose_precision(hw)
    # memory.estimate for this model, precision and kind of device (CUDA's kernels keep a little less), per GPU
    predict = functools.partial(_predict_per_gpu, cfg, precision, hw.kind, shard, gpus, optimizer)
    share = "" if hw.usable_fraction == 1 else f", of which the GPU may use {hw.usable_fraction:.0%}"
    kept_for = {
        "cuda": "the CUDA context and allocator fragmentation",
        "mps": "macOS and other apps",
        "cpu": "the OS and other programs",
    }.get(hw.kind, "everything else")
    reasons = [
        f"memory: {has}{share}; keeping {headroom:.0%} headroom for {kept_for} leaves {gib(usable)} for training",
        precision_reason,
    ]
    n_params, per_param = count_params(cfg), static_bytes_per_param(precision)["total"]
    per_param += 2 - static_bytes_per_param(precision)["optimizer"] if optimizer == "adamw8bit" else 0  # ~2: codes
    autocast_note = (
        "; autocast keeps fp32 weights, so it saves activation memory, not this" if precision != "fp32" else ""
    )
    reasons.append(
        f"static memory (weights + grads + AdamW m and v) = {per_param} B/param x "
        f"{n_params / 1e6:.1f}M params = {gib(n_params * per_param)}{autocast_note}"
    )
    if gpus > 1:
        split = memory.sharded_state_bytes(cfg, precision, shard, gpus)
        what = {"none": "nothing (DDP: every GPU holds it all)", "zero1": "AdamW's state", "fsdp": "all of it"}[shard]
        reasons.append(
            f"{gpus} GPUs, --shard {shard}: they split {what}, so each holds {gib(sum(split.values()))} of it"
            + (" plus the weights FSDP gathers (the embedding and two blocks at a time)" if shard == "fsdp" else "")
            + f"; each takes {effective_batch // gpus} of the {effective_batch} sequences per step"
        )

    # Micro-batches: the divisors of each GPU's share (accum a whole number) up to the largest that fits anyhow.
    share = effective_batch // gpus
    fits = lambda b: any(predict(b, ctx, checkpointing=m).peak <= usable for m in CHECKPOINTING_MODES)  # noqa: E731
    candidates = micro_batch_candidates(share, fits)
    fitting = {mode: _largest_micro_batch(predict, ctx, candidates, mode, usable) for mode in CHECKPOINTING_MODES}
    cost = {mode: relative_step_time(cfg, ctx, mode) for mode in CHECKPOINTING_MODES}
    if fitting["none"][0]:
        mode = "none"  # checkpointing only when needed: a smaller micro-batch costs no extra compute
    else:
        # The cheapest mode that fits at all; at equal cost (full, sqrt) the one with the larger micro-batch.
        usable_modes = [m for m in CHECKPOINTING_MODES if fitting[m][0]]
        mode = min(usable_modes, key=lambda m: (cost[m], -fitting[m][0])) if usable_modes else None

    if mode is None:
        lost = _does_not_fit(preset, cfg, hw, ctx, effective_batch, precision, predict, usable, headroom, reasons)
        lever = _with_sharding(lost.lever, cfg, precision, usable)
        if optimizer == "adamw" and shard == "none":  # would 8-bit moments, a quarter of AdamW's, make it fit?
            eight = plan(preset, hardware, ctx, effective_batch, headroom, memory_bytes, gpus, shard, "adamw8bit")
            lever += f"; or --optimizer adamw8bit (fits: {eight.checkpointing} checkpointing)" if eight.fits else ""
        return replace(lost, accum=share, gpus=gpus, shard=shard, lever=lever, optimizer=optimizer)

    micro, est = fitting[mode]
    accum = share // micro
    i = candidates.index(micro)
    if micro == share:
        reasons.append(
            f"micro-batch {micro}: the whole {'share of the ' if gpus > 1 else ''}effective batch fits in one "
            f"forward/backward (predicted peak {gib(est.peak)}), so no accumulation"
        )
    else:
        bigger = predict(candidates[i + 1], ctx, checkpointing=mode)
        reasons.append(
            f"micro-batch {micro}: the largest divisor of {share} whose predicted peak "
            f"({gib(est.peak)}) fits; {candidates[i + 1]} would need {gib(bigger.peak)}"
        )
        reasons.append(
            f"accum {accum} = {share} / {micro}: accumulating gives the same gradients "
            f"as one batch of {share}, at the cost of {accum} smaller steps per update"
        )
    if mode == "none":
        best_other = max(CHECKPOINTING_MODES, key=lambda m: fitting[m][0])
        extra = (
            f"; {best_other} checkpointing would allow micro-batch {fitting[best_other][0]} but costs "
            f"{cost[best_other]:.2f}x the time"
            if fitting[best_other][0] > micro
            else ""
        )
        reasons.append(f"checkpointing none: it fits without, and recomputing costs time{extra}")
    else:
        one = predict(1, ctx, checkpointing="none")
        tried = ", ".join(
            f"{m} {'fits' if fitting[m][0] else 'does not fit'} ({cost[m]:.2f}x)"
            for m in CHECKPOINTING_MODES
            if m != "none"
        )
        reasons.append(
            f"checkpointing {mode}: even micro-batch 1 needs {gib(one.peak)} without it; "
            f"{tried}: {mode} is the cheapest that fits, with the largest micro-batch"
        )
        reasons.append(
            f"step time {cost[mode]:.2f}x: forward 1 + backward 2 + recomputation "
            f"{3 * cost[mode] - 3:.2f} of a forward (FLOP model), over 3"
        )
    return Plan(
        preset,
        hw,
        ctx,
        effective_batch,
        precision,
        precision == "fp16",
        micro,
        accum,
        mode,
        est.peak,
        usable,
        cost[mode],
        True,
        reasons,
        None,
        est,
        gpus,
        shard,
        optimizer,
    )


def _predict_per_gpu(
    cfg: ModelConfig, precision: str, kind: str, shard: str, gpus: int, optimizer: str, batch: int, ctx: int, **mode
) -> memory.MemoryBreakdown:
    """memory.estimate of one GPU's step, its static state split over `gpus` as `shard` says."""
    est = memory.estimate(cfg, batch, ctx, precision=precision, device=kind, optimizer=optimizer, **mode)
    return memory.sharded_estimate(est, cfg, precision, shard, gpus, checkpointing=mode.get("checkpointing", "none"))


def gpus_to_fit_static(cfg: ModelConfig, precision: str, shard: str, budget: int, most: int = 1024) -> int | None:
    """The fewest GPUs (a power of two) whose share of the static state under `shard` fits `budget`; None: none do."""
    gpus = 1
    while gpus <= most:
        if sum(memory.sharded_state_bytes(cfg, precision, shard, gpus).values()) <= budget:
            return gpus
        gpus *= 2
    return None


def _with_sharding(lever: str, cfg: ModelConfig, precision: str, usable: int) -> str:
    """The lever, plus how many GPUs --shard fsdp needs before the static state alone fits each one."""
    n = gpus_to_fit_static(cfg, precision, "fsdp", usable)
    if n is None or n == 1:  # no number of GPUs helps, or one already holds the static state: the rest does not fit
        return lever
    return f"{lever}; or split the static state: --shard fsdp over at least {n} GPUs"


def _does_not_fit(
    preset: str,
    cfg: ModelConfig,
    hw: Hardware,
    ctx: int,
    effective_batch: int,
    precision: str,
    predict: Predictor,
    usable: int,
    headroom: float,
    reasons: list[str],
) -> Plan:
    """The fits=False plan: micro-batch 1 in the mode that saves most, and a lever that would make it fit."""
    ests = {m: predict(1, ctx, checkpointing=m) for m in CHECKPOINTING_MODES}
    mode = min(ests, key=lambda m: (ests[m].peak, relative_step_time(cfg, ctx, m)))
    est = ests[mode]
    pure = 8 * count_params(cfg)  # bf16-pure: bf16 weights, grads, AdamW m and v
    smaller = f"bf16-pure (static {gib(pure)}) or " if hw.supports_bf16 and pure < usable else ""
    needed = est.peak / (1 - headroom) / hw.usable_fraction
    smaller += f"a smaller preset, or a device with at least {gib(needed)}"
    shorter = _longest_fitting_ctx(predict, ctx, mode, usable)
    if est.static > usable:
        lever = (
            f"static memory alone (weights + grads + AdamW = {gib(est.static)}) exceeds the "
            f"{gib(usable)} budget: use {smaller}"
        )
    elif shorter:
        lever = (
            f"even micro-batch 1 with {mode} checkpointing needs {gib(est.peak)} but {gib(usable)} is "
            f"usable: shorten ctx to {shorter} or less, or use {smaller}"
        )
    else:
        one_token = predict(1, 1, checkpointing=mode)
        lever = (
            f"even one token per step peaks at {gib(one_token.peak)}: the weights, AdamW's state and the "
            f"gradients alive at its worst moment (all of them together, the static memory, are "
            f"{gib(est.static)}), plus buffers that do not shrink with ctx (AdamW's temporaries "
            f"{gib(est.optimizer_step)}, autocast's weight copies {gib(est.weight_copies)}, the tied "
            f"embedding's gradients); use {smaller}"
        )
    reasons.append(
        f"nothing fits: the smallest predicted peak is {gib(est.peak)} (micro-batch 1, "
        f"{mode} checkpointing), above the {gib(usable)} budget"
    )
    return Plan(
        preset,
        hw,
        ctx,
        effective_batch,
        precision,
        precision == "fp16",
        1,
        effective_batch,
        mode,
        est.peak,
        usable,
        relative_step_time(cfg, ctx, mode),
        False,
        reasons,
        lever,
        est,
    )


def _longest_fitting_ctx(predict: Predictor, ctx: int, mode: str, usable: int) -> int:
    """The longest ctx below `ctx` at which micro-batch 1 fits in `mode` (0 if none): a binary search."""
    lo, hi, best = 1, ctx - 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if predict(1, mid, checkpointing=mode).peak <= usable:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


# ----------------------------------------------------------------------------------------------------------
# Recommended settings from rules of thumb, set against the planner

# The effective batch of a published guide's rules of thumb: "GPU memory caps you at batch=32 ... effective
# batch = 32 * 4 = 128". The course's example command plans the same 128.
RULES_OF_THUMB_EFFECTIVE_BATCH = 128

# A published guide's table of recommended settings per model and GPU, as data. accum is a (low, high)
# range. Its "Colab A100" and "A100" are taken as the 40 GB A100 Colab rents.
RULES_OF_THUMB: list[dict] = [
    dict(zip(("preset", "hardware", "precision", "accum", "checkpointing"), row))
    for row in [
        ("10m", "mps", "bf16", (1, 1), False),
        ("10m", "t4", "fp16 + GradScaler", (1, 1), False),
        ("10m", "a100-40", "bf16", (1, 1), False),
        ("30m", "t4", "fp16 + GradScaler", (2, 4), False),
        ("125m", "t4", "fp16 + GradScaler", (4, 8), True),
        ("125m", "a100-40", "bf16", (1, 1), False),
    ]
]


def recommended_table(
    presets: tuple[str, ...] = COURSE_PRESETS,
    hardware: tuple[str, ...] = ("cpu", "mps", "t4", "a100-80"),
    ctx: int | None = None,
    effective_batch: int = RULES_OF_THUMB_EFFECTIVE_BATCH,
) -> list[dict]:
    """A table of recommended settings, computed by the planner: one row per preset x hardware.

    ctx None means each preset's maximum context. Print it with tabulate(rows, headers="keys").
    """
    rows = []
    for preset in presets:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
        for hw in hardware:
            p = plan(preset, hw, ctx or PRESETS[preset].ctx, effective_batch)
            rows.append(
                {
                    "preset": preset,
                    "hardware": p.hardware.key,
                    "ctx": p.ctx,
                    "precision": p.precision_label,
                    "micro_batch": p.micro_batch,
                    "accum": p.accum,
                    "checkpointing": p.checkpointing,
                    "peak_GiB": round(p.predicted_peak_bytes / GIB, 2),
                    "usable_GiB": round(p.usable_bytes / GIB, 2),
                    "fits": p.fits,
                }
            )
    return rows


def compare_with_rules_of_thumb(effective_batch: int = RULES_OF_THUMB_EFFECTIVE_BATCH) -> list[dict]:
    """Each row of RULES_OF_THUMB next to the planner's choice for the same model and hardware, and why.

    The rules of thumb guess; the planner uses minigpt.memory's model of this course's GPT.
    The rule_* columns hold the rule of thumb, the plan_* columns the planner's choice.
    """
    rows = []
    for rule in RULES_OF_THUMB:
        p = plan(rule["preset"], rule["hardware"], PRESETS[rule["preset"]].ctx, effective_batch)
        low, high = rule["accum"]
        differs, why = [], []
        if p.precision_label != rule["precision"]:
            differs.append("precision")
        if not low <= p.accum <= high:
            differs.append("accum")
            why.append(
                f"micro-batch {p.micro_batch} is the largest that fits (predicted "
                f"{gib(p.predicted_peak_bytes)} of {gib(p.usable_bytes)}), so accum = "
                f"{effective_batch} / {p.micro_batch}"
            )
        if (p.checkpointing != "none") != rule["checkpointing"]:
            differs.append("checkpointing")
            why.append(
                "it fits without checkpointing, so the planner avoids the recompute"
                if p.checkpointing == "none"
                else f"even micro-batch 1 does not fit without it, so it uses {p.checkpointing}"
            )
        rows.append(
            {
                "preset": rule["preset"],
                "hardware": rule["hardware"],
                "rule_precision": rule["precision"],
                "plan_precision": p.precision_label,
                "rule_accum": str(low) if low == high else f"{low}~{high}",
                "plan_accum": p.accum,
                "rule_ckpt": "yes" if rule["checkpointing"] else "no",
                "plan_ckpt": p.checkpointing,
                "agrees": not differs,
                "why": "; ".join(why) if why else ("same" if not differs else f"{', '.join(differs)} differ"),
            }
        )
    return rows
