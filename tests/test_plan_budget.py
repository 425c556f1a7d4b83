"""The budget planner: the fastest set of levers that fits, the largest model of the family, and its command."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.budget import MALLOC_SETTING
from minigpt.cli import build_parser, main, train_config_from_args
from minigpt.model import count_params
from minigpt.plan_budget import (
    LEVER_NAMES,
    NO_LEVERS,
    Levers,
    all_levers,
    family_model,
    largest,
    plan_for_budget,
    predict,
    predicted_seconds,
)
from minigpt.step_time import Calibration

MIB, GIB = 2**20, 2**30
# A fixed calibration and runtime so that the choices do not depend on how loaded this machine is: bf16 twice
# as fast per FLOP as fp32 (as on a CPU with bf16 instructions), the 8-bit step 4x AdamW's, offloading at 1 GB/s.
RATES = Calibration(
    compute={"fp32": (1e-11, 1e-9, 1e-3), "bf16": (5e-12, 1e-9, 1e-3), "fp16": (2e-10, 1e-9, 1e-3)}
    | {"bf16-pure": (5e-12, 1e-9, 1e-3)},
    optimizer={"adamw": 2e-9, "adamw8bit": 8e-9},
    optimizer_extra={},
    recompute={"none": 0.0, "full": 1.0, "sqrt": 1.0, "selective": 0.5},
    chunked_loss=1.5,
    unpack={"int8": 4e-10, "nf4": 1.4e-9},
    offload=1e9,
    source="a test's",
)
RUNTIME = 350 * MIB
CHOICES = all_levers(["fp32", "bf16", "bf16-pure"])


def plan(model, budget, **kw):
    return plan_for_budget(model, budget, 256, 1, "cpu", RUNTIME, RATES, CHOICES, **kw)


def test_the_plan_is_the_fastest_set_that_fits():
    model = family_model(8)
    chosen = plan(model, 700 * MIB)
    assert chosen.fits and chosen.predicted_process_bytes <= 0.95 * 700 * MIB  # the plan keeps its margin
    fitting_seconds = []  # brute force over every combination: nothing that fits is faster
    for levers in CHOICES:
        est = predict(model, 1, 256, levers, "cpu")
        if RUNTIME + est.peak <= int(0.95 * 700 * MIB):
            fitting_seconds.append(sum(predicted_seconds(model, 1, 256, levers, est, RATES).values()))
    assert sum(chosen.seconds.values()) == min(fitting_seconds)
    assert chosen.breakdown.peak == predict(model, 1, 256, chosen.levers, "cpu").peak  # the estimate, unchanged


def test_a_roomy_budget_needs_no_memory_lever_and_says_why_each_is_off():
    chosen = plan(family_model(2), 8 * GIB)
    assert chosen.levers.optimizer == "adamw" and not chosen.levers.offload_activations
    assert chosen.levers.checkpointing == "none" and chosen.levers.loss_chunks == 1
    for attr, label in LEVER_NAMES.items():
        if attr not in ("lora_rank", "base_dtype"):  # LoRA is a lever of fine-tuning only
            assert any(label in reason for reason in chosen.reasons), label  # every lever gets its reason


def test_a_tight_budget_turns_levers_on_and_each_is_needed_or_faster():
    roomy, tight = plan(family_model(8), 8 * GIB), plan(family_model(8), 620 * MIB)
    assert tight.fits and tight.breakdown.peak < roomy.breakdown.peak
    assert sum(tight.seconds.values()) >= sum(roomy.seconds.values())  # memory is paid for in time
    assert any("nothing fits" in r for r in tight.reasons)


def test_the_largest_model_fits_and_the_next_does_not():
    best = largest(2 * GIB, 256, 1, "cpu", CHOICES, RUNTIME, RATES)
    k = best.model.n_layer
    assert best.fits and best.predicted_process_bytes <= 0.95 * 2 * GIB
    assert not plan(family_model(k + 1), 2 * GIB).fits


def test_sixteen_gib_trains_a_billion_parameters_and_2_5x_the_naive_plan():
    best = largest(16 * GIB, 256, 1, "cpu", CHOICES, RUNTIME, RATES)
    naive = largest(16 * GIB, 256, 1, "cpu", [NO_LEVERS], RUNTIME, RATES)
    n_best, n_naive = count_params(best.model), count_params(naive.model)
    assert n_best >= 1e9 and n_best >= 2.5 * n_naive, (n_best, n_naive)


def test_a_budget_too_small_names_the_smallest_that_works():
    with pytest.raises(ValueError, match=r"give --budget (\d+)MiB or more") as err:
        largest(100 * MIB, 256, 1, "cpu", CHOICES, RUNTIME, RATES)
    smallest = int(err.value.args[0].rsplit("--budget ", 1)[1].split("MiB")[0]) * MIB
    assert largest(smallest + MIB, 256, 1, "cpu", CHOICES, RUNTIME, RATES).fits


def test_bf16_weights_without_master_copies_are_never_planned():
    # without stochastic rounding they lose every update below half a bf16 step (chapter 1's lost update)
    assert all(lv.master_weights for lv in CHOICES if lv.precision == "bf16-pure")


def test_the_printed_command_trains_exactly_the_planned_model_and_levers():
    chosen = plan(family_model(6), 600 * MIB)
    words = shlex.split(chosen.command(steps=3))
    assert words[0] == "MALLOC_MMAP_THRESHOLD_=65536"  # freed blocks go back to the OS: RSS follows the tensors
    cfg = train_config_from_args(build_parser().parse_args(words[2:]))
    assert cfg.model_config() == chosen.model
    got = Levers(
        cfg.precision,
        cfg.master_weights,
        cfg.optimizer,
        cfg.optimizer_in_backward,
        cfg.checkpointing,
        cfg.loss_chunks,
        cfg.offload_activations,
    )
    assert got == chosen.levers and (cfg.batch, cfg.ctx) == (1, 256)
    assert predict(cfg.model_config(), cfg.batch, cfg.ctx, got, "cpu").peak == chosen.breakdown.peak


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["plan", "--budget", "8", "--largest"], "no unit"),
        (["plan", "--largest"], "--largest needs --budget"),
        (["plan", "--budget", "1GiB", "--table"], "leave it out"),
        (["plan", "--budget", "1GiB", "--largest", "--preset", "10m"], "leave out --preset"),
    ],
)
def test_bad_budget_flags_get_one_line(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err


def test_a_budget_above_the_machine_warns_and_still_plans(capsys):
    assert main(["plan", "--budget", "4096GiB", "--preset", "tiny", "--ctx", "16"]) == 0
    out = capsys.readouterr()
    assert "warning: --budget 4096.00 GiB is more than this machine's" in out.err and "Run it:" in out.out


def test_fine_tuning_may_choose_lora_where_full_training_does_not_fit():
    model = family_model(8)
    full = plan(model, 560 * MIB)
    tuned = plan_for_budget(model, 560 * MIB, 256, 1, "cpu", RUNTIME, RATES, all_levers(["fp32"], fine_tune=True))
    assert not full.fits or full.levers.lora_rank is None
    assert tuned.fits and tuned.levers.lora_rank == 8
    assert "--lora-rank 8" in tuned.command() and tuned.predicted_process_bytes <= 0.95 * 560 * MIB


@pytest.mark.parametrize(("preset", "ctx"), [("tiny", 64), ("10m", 256)])
def test_plan_budget_plans_the_presets_own_context_by_default(preset, ctx, capsys):
    """--ctx defaults to the preset's maximum, as its help says (not a fixed 256)."""
    assert main(["plan", "--budget", "64GiB", "--preset", preset, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["ctx"] == ctx and f"--ctx {ctx}" in planned["command"], planned


def test_a_tie_never_turns_off_gradient_clipping_or_other_result_changing_levers():
    """With memory to spare, the step in backward (no clipping) or 8-bit moments take the same predicted time as
    AdamW: the plan keeps AdamW with clipping (a lever that changes the training result is chosen to fit or for
    speed, never to break a tie)."""
    from minigpt.plan_budget import changes_the_result

    model = family_model(8)
    roomy = plan(model, 64 * GIB)
    assert roomy.fits and not changes_the_result(roomy.levers), roomy.levers
    assert "--grad-clip 0" not in roomy.command()


# VmHWM, not getrusage: ru_maxrss survives exec, so a child forked from a large pytest process reports its size
BUILD_PEAK = """
import torch
from minigpt.config import TrainConfig
from minigpt.step import build_step_state
def status(key): return int(dict(l.split(":", 1) for l in open("/proc/self/status"))[key].split()[0]) * 1024
warm = TrainConfig(preset="tiny", n_layer=1, n_embd=64, n_head=1, verbose=False)  # the first ops' threads, once
build_step_state(warm.model_config(), warm, torch.device("cpu"))
before = status("VmRSS")
cfg = TrainConfig(preset="tiny", n_layer=4, n_embd=512, n_head=8, lora_rank=8, base_dtype="nf4", verbose=False)
state = build_step_state(cfg.model_config(), cfg, torch.device("cpu"))
print(before, status("VmHWM"), status("VmRSS"))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_a_quantized_base_is_built_in_fp32_first_and_the_plan_counts_it():
    """A QLoRA step holds its base in half a byte a weight, but train() builds the model in fp32 (its seeded
    init) before quantizing it. That moment is the process's peak, and the plan predicts it."""
    from minigpt.config import TrainConfig
    from minigpt.plan_budget import model_build_bytes

    done = subprocess.run(
        [sys.executable, "-c", BUILD_PEAK],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **MALLOC_SETTING},
    )
    before, peak, after = (int(v) for v in done.stdout.split())
    cfg = TrainConfig(preset="tiny", n_layer=4, n_embd=512, n_head=8, lora_rank=8, base_dtype="nf4")
    predicted = model_build_bytes(cfg.model_config())
    # 10%: the build's own Python objects and the allocator's page rounding come on top of the tensors
    assert abs((peak - before) - predicted) <= 0.10 * predicted, f"{(peak - before) / predicted:.3f}x the prediction"
    assert after - before < 0.35 * predicted  # quantized, the base is far smaller than while it was built

    model = cfg.model_config()
    choices = [lv for lv in all_levers(["fp32"], fine_tune=True) if lv.base_dtype == "nf4"]
    planned = plan_for_budget(model, 4 * GIB, 64, 1, "cpu", RUNTIME, RATES, choices)
    assert planned.predicted_process_bytes == RUNTIME + predicted > RUNTIME + planned.breakdown.peak
    assert any("building the model" in reason for reason in planned.reasons)
