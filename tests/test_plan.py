import json

import pytest

from minigpt import memory
from minigpt.hardware import GB, HARDWARE, detect_hardware
from minigpt.model import PRESETS
from minigpt.plan import (
    RULES_OF_THUMB,
    compare_with_rules_of_thumb,
    plan,
    recommended_table,
    relative_step_time,
)
from minigpt.recompute import CHECKPOINTING_MODES

# The course's example command: minigpt plan --hardware t4 --preset 125m --ctx 1024 --effective-batch 128
EXAMPLE = dict(preset="125m", ctx=1024, effective_batch=128)


def divisors(n: int) -> list[int]:
    return [m for m in range(1, n + 1) if n % m == 0]


def peak(preset: str, batch: int, ctx: int, precision: str, mode: str, device: str = "cuda") -> int:
    """The predicted peak the planner compares with the budget (it passes the hardware's kind as device)."""
    return memory.estimate(PRESETS[preset], batch, ctx, precision=precision, checkpointing=mode, device=device).peak


def test_t4_gets_fp16_with_scaler_and_a100_gets_bf16():
    t4 = plan(hardware="t4", **EXAMPLE)
    assert (t4.precision, t4.use_scaler) == ("fp16", True)
    for key in ("a100-80", "a100-40", "h100"):
        a100 = plan(hardware=key, **EXAMPLE)
        assert (a100.precision, a100.use_scaler) == ("bf16", False)
    assert plan(hardware="v100-16", **EXAMPLE).precision == "fp16"  # Volta: no bf16 either
    assert plan(hardware="cpu", **EXAMPLE).precision == "fp32"  # a CPU without bf16 instructions


@pytest.mark.parametrize("hardware", ["t4", "a100-80", "mps", "cpu", "rtx4090"])
@pytest.mark.parametrize("effective_batch", [128, 96, 7])
def test_micro_batch_is_the_largest_divisor_that_fits(hardware, effective_batch):
    p = plan("125m", hardware, 1024, effective_batch)
    kind = HARDWARE[hardware].kind
    assert p.fits
    assert p.micro_batch * p.accum == effective_batch
    chosen = peak("125m", p.micro_batch, 1024, p.precision, p.checkpointing, kind)
    assert chosen == p.predicted_peak_bytes <= p.usable_bytes
    larger = [m for m in divisors(effective_batch) if m > p.micro_batch]
    if larger:  # the next larger candidate must not fit (else the planner left memory unused)
        assert peak("125m", larger[0], 1024, p.precision, p.checkpointing, kind) > p.usable_bytes


def test_usable_bytes_is_memory_minus_headroom_and_mps_shares_its_ram():
    assert plan(hardware="t4", **EXAMPLE).usable_bytes == int(16 * GB * 0.9)
    assert plan(hardware="t4", headroom=0.2, **EXAMPLE).usable_bytes == int(16 * GB * 0.8)
    mac = plan("10m", "mps", 256, 32, memory_bytes=32 * GB)
    assert mac.usable_bytes == int(int(32 * GB * HARDWARE["mps"].usable_fraction) * 0.9)


def test_no_checkpointing_when_it_fits_without():
    for hardware in ("t4", "a100-80", "cpu"):
        p = plan(hardware=hardware, **EXAMPLE)
        assert peak("125m", 1, 1024, p.precision, "none", HARDWARE[hardware].kind) <= p.usable_bytes
        assert p.checkpointing == "none"
        assert p.relative_step_time == 1.0


def test_checkpointing_is_chosen_when_only_it_fits():
    def one_sequence(mode: str) -> int:  # fp32 on a CPU: activations dominate one sequence of 1024 tokens
        return peak("125m", 1, 1024, "fp32", mode, "cpu")

    without = one_sequence("none")
    cheapest_with = min(one_sequence(m) for m in CHECKPOINTING_MODES if m != "none")
    assert cheapest_with < without  # checkpointing saves memory at micro-batch 1 for this shape
    budget = (cheapest_with + without) // 2  # between the two: only checkpointing fits
    p = plan("125m", "cpu", 1024, 128, headroom=0.0, memory_bytes=budget)
    assert p.fits and p.checkpointing != "none"
    assert p.micro_batch * p.accum == 128
    assert peak("125m", p.micro_batch, 1024, "fp32", p.checkpointing, "cpu") <= budget
    # the cheapest (in step time) of the modes that fit at micro-batch 1
    fitting = [m for m in CHECKPOINTING_MODES if one_sequence(m) <= budget]
    cost = {m: relative_step_time(PRESETS["125m"], 1024, m) for m in fitting}
    assert cost[p.checkpointing] == min(cost.values())
    assert p.relative_step_time == cost[p.checkpointing] > 1.0
    assert f"checkpointing {p.checkpointing}" in p.explain()


def test_checkpointing_costs_about_one_extra_forward():
    cfg = PRESETS["125m"]
    none, selective, full, sqrt = (relative_step_time(cfg, 1024, m) for m in ("none", "selective", "full", "sqrt"))
    assert none == 1.0
    assert 1.0 < selective < full
    # full recomputes the blocks' forward (not the output head): just under 1 + 1/3
    assert full == sqrt and 1.25 < full < 4 / 3


def test_static_memory_too_large_gives_fits_false_and_a_lever():
    p = plan("125m", "cpu", 1024, 128, memory_bytes=1 * GB)  # fp32 static alone is ~1.9 GB
    assert not p.fits
    assert "static memory" in p.lever and "smaller preset" in p.lever
    assert p.predicted_peak_bytes > p.usable_bytes
    assert "DOES NOT FIT" in p.explain() and p.lever in p.explain()


def test_activations_too_large_names_a_shorter_ctx_that_fits():
    def best(ctx: int) -> int:  # the smallest predicted peak of one sequence, fp32 on a CPU
        return min(peak("125m", 1, ctx, "fp32", m, "cpu") for m in CHECKPOINTING_MODES)

    assert best(512) < best(1024)
    budget = (best(512) + best(1024)) // 2  # one sequence of 512 tokens fits, one of 1024 does not
    p = plan("125m", "cpu", 1024, 128, headroom=0.0, memory_bytes=budget)
    assert not p.fits and p.lever.count("shorten ctx to") == 1
    shorter = int(p.lever.split("shorten ctx to ")[1].split()[0])
    assert 512 <= shorter < 1024
    assert plan("125m", "cpu", shorter, 128, headroom=0.0, memory_bytes=budget).fits
    assert not plan("125m", "cpu", shorter + 1, 128, headroom=0.0, memory_bytes=budget).fits


def test_fixed_step_buffers_too_large_says_ctx_would_not_help():
    static = memory.estimate(PRESETS["125m"], 1, 1, precision="bf16").static
    one_token = min(peak("125m", 1, 1, "bf16", m) for m in CHECKPOINTING_MODES)
    assert static < one_token
    p = plan("125m", "a100-80", 1024, 128, headroom=0.0, memory_bytes=(static + one_token) // 2)
    assert not p.fits
    assert "do not shrink with ctx" in p.lever and "shorten ctx" not in p.lever


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(preset="1t"), "choose one of"),
        (dict(hardware="tpu"), "choose one of"),
        (dict(ctx=2048), "maximum of 1024"),
        (dict(ctx=0), "between 1"),
        (dict(effective_batch=0), "at least 1"),
        (dict(headroom=1.0), "headroom"),
        (dict(memory_bytes=0), "memory_bytes"),
    ],
)
def test_bad_input_raises_a_clear_error(kwargs, message):
    args = dict(preset="125m", hardware="t4", ctx=1024, effective_batch=128) | kwargs
    with pytest.raises(ValueError, match=message):
        plan(**args)


def test_plan_for_this_machine():
    hw = detect_hardware("cpu")
    assert hw.kind == "cpu" and hw.memory_bytes > 0 and not hw.supports_fp16
    p = plan("tiny", hw, 64, 8)
    assert p.hardware is hw and p.fits
    assert p.precision == ("bf16" if hw.supports_bf16 else "fp32")  # bf16 only with bf16 instructions


def test_to_dict_is_json():
    d = json.loads(json.dumps(plan(hardware="t4", **EXAMPLE).to_dict()))
    assert d["hardware"]["key"] == "t4" and d["micro_batch"] * d["accum"] == 128


def test_recommended_table_has_one_planned_row_per_preset_and_hardware():
    presets, hardware = ("10m", "30m", "125m"), ("cpu", "mps", "t4", "a100-80")
    rows = recommended_table(presets, hardware, effective_batch=32)
    assert [(r["preset"], r["hardware"]) for r in rows] == [(p, h) for p in presets for h in hardware]
    for r in rows:
        p = plan(r["preset"], r["hardware"], PRESETS[r["preset"]].ctx, 32)
        assert (r["micro_batch"], r["accum"], r["checkpointing"]) == (p.micro_batch, p.accum, p.checkpointing)
        assert r["micro_batch"] * r["accum"] == 32


def test_compare_with_rules_of_thumb_covers_every_row_and_agrees_on_precision():
    rows = compare_with_rules_of_thumb()
    assert len(rows) == len(RULES_OF_THUMB)
    # the rules' precision column follows from the hardware alone; the planner's rule must reproduce it
    assert all(r["rule_precision"] == r["plan_precision"] for r in rows)
    for r in rows:
        assert r["agrees"] == (r["why"] == "same")


# ------------------------------------------------------------------------------------------------------------
# Several GPUs: --gpus N --shard none | zero1 | fsdp, planned per GPU


def test_7b_on_8_a100s_with_fsdp_is_planned_per_gpu():
    """Each GPU holds 1/8 of the 16 bytes per parameter and takes 1/8 of the sequences of every step."""
    from minigpt.plan import PLAN_MODELS

    p = plan("7b", "a100-80", 4096, 64, gpus=8, shard="fsdp")
    assert p.fits and p.gpus == 8 and p.shard == "fsdp" and p.precision == "bf16"
    assert p.micro_batch * p.accum * p.gpus == 64
    assert p.breakdown.static == sum(memory.sharded_state_bytes(PLAN_MODELS["7b"], "bf16", "fsdp", 8).values())
    assert p.breakdown.static * 8 <= memory.estimate(PLAN_MODELS["7b"], 1, 4096, "bf16").static  # padding: none here
    assert p.predicted_peak_bytes <= p.usable_bytes
    text = p.explain()
    assert "8 x NVIDIA A100 80GB" in text and "fsdp over 8 GPUs" in text and "per GPU" in text


def test_7b_on_one_a100_does_not_fit_and_the_lever_says_how_many_gpus_fsdp_needs():
    """98 GiB of static state on a 67 GiB budget: no micro-batch or checkpointing helps, 2 GPUs with FSDP do."""
    p = plan("7b", "a100-80", 4096, 64)
    assert not p.fits and p.breakdown.static > p.usable_bytes
    assert "--shard fsdp over at least 2 GPUs" in p.lever
    assert plan("7b", "a100-80", 4096, 64, gpus=2, shard="fsdp").breakdown.static < p.usable_bytes


@pytest.mark.parametrize("shard", ["none", "zero1", "fsdp"])
def test_more_gpus_shrink_each_gpus_static_memory_as_the_shard_mode_says(shard):
    one = plan("125m", "t4", 1024, 128)
    four = plan("125m", "t4", 1024, 128, gpus=4, shard=shard)
    if shard == "none":  # DDP: every GPU holds everything
        assert four.breakdown.static == one.breakdown.static
    else:
        assert four.breakdown.optimizer < one.breakdown.optimizer
        assert (four.breakdown.weights < one.breakdown.weights) == (shard == "fsdp")
    assert four.micro_batch * four.accum == 128 // 4
    assert four.predicted_peak_bytes <= four.usable_bytes


def test_bad_gpu_settings_are_clear_errors():
    with pytest.raises(ValueError, match="multiple of --gpus"):
        plan("125m", "t4", 1024, 100, gpus=8)
    with pytest.raises(ValueError, match="--gpus must be at least 1"):
        plan("125m", "t4", 1024, 128, gpus=0)
    with pytest.raises(ValueError, match="--shard"):
        plan("125m", "t4", 1024, 128, gpus=2, shard="zero2")


def test_a_budget_is_named_as_a_budget_beside_the_machine_memory():
    """explain() says the plan's memory is a budget given to it, and what the machine itself has."""
    p = plan("tiny", "cpu", 64, 4, headroom=0.0, memory_bytes=2**30)
    line = next(r for r in p.reasons if r.startswith("memory:"))
    assert "budget of 1.00 GiB" in line and "has" in line


def test_no_sharding_lever_when_one_gpu_already_holds_the_static_state():
    """'--shard fsdp over at least 1 GPUs' says nothing: the lever names sharding only from 2 GPUs up."""
    p = plan("125m", "t4", 1024, 128, memory_bytes=int(2.2e9))
    assert not p.fits and "at least 1 GPUs" not in p.lever


def test_the_planner_names_8bit_adamw_where_only_its_moments_fit_and_plans_with_it():
    """125m on 1.8 GiB: no micro-batch and no checkpointing mode fits with AdamW's 8 bytes of moments a
    parameter; with AdamW8bit's (about 2) micro-batch 2 does, and the lever says so."""
    from minigpt.plan import plan

    gib = 2**30
    adamw = plan("125m", "t4", 256, 8, memory_bytes=int(1.8 * gib))
    assert not adamw.fits and "--optimizer adamw8bit (fits" in adamw.lever
    eight = plan("125m", "t4", 256, 8, memory_bytes=int(1.8 * gib), optimizer="adamw8bit")
    assert eight.fits and eight.optimizer == "adamw8bit" and "adamw8bit" in eight.explain()
    assert eight.breakdown.optimizer < adamw.breakdown.optimizer / 3
