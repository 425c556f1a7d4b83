"""The planner's clock: step_seconds at calibrated rates, and the calibration cached per machine and torch."""

import json
from dataclasses import replace

import pytest
import torch

from minigpt import calibrate, memory
from minigpt.budget import MALLOC_SETTING
from minigpt.calibrate import LORA_BASES
from minigpt.heap import MMAP_THRESHOLD_BYTES
from minigpt.model import count_params, get_config
from minigpt.plan_budget import Levers, all_levers, family_model, plan_for_budget
from minigpt.step_time import Calibration, part_seconds, step_seconds

MIB = 2**20
# A fixed calibration: the numbers a test reasons with, never this machine's load. The 8-bit step costs 4x AdamW's.
TINY = Calibration(
    compute={p: (1e-11, 1e-9, 1e-3) for p in ("fp32", "bf16", "fp16", "bf16-pure")},
    optimizer={"adamw": 2e-9, "adamw8bit": 8e-9},
    optimizer_extra={"fp16": 1e-10},
    recompute={"none": 0.0, "full": 1.0, "sqrt": 1.0, "selective": 0.5},
    chunked_loss=1.5,
    unpack={"int8": 4e-10, "nf4": 1.4e-9},
    offload=1e9,
    spread={"fp32 0": 0.1},
    created="2026-01-01 00:00 UTC",
    source="a test's",
)


def test_the_optimizer_costs_what_the_calibration_measured_per_parameter():
    cfg = get_config("10m")
    n = count_params(cfg)
    adamw = step_seconds(cfg, 256, 256, n, TINY, optimizer="adamw")["optimizer"]
    eight = step_seconds(cfg, 256, 256, n, TINY, optimizer="adamw8bit")["optimizer"]
    assert eight / adamw == pytest.approx(4.0)  # the calibration's ratio, no constant of its own
    doubled = Calibration(**{**TINY.__dict__, "optimizer": {"adamw": 2e-9, "adamw8bit": 16e-9}})
    assert step_seconds(cfg, 256, 256, n, doubled, optimizer="adamw8bit")["optimizer"] == pytest.approx(2 * eight)


def test_levers_add_their_calibrated_share():
    cfg = get_config("10m")
    n = count_params(cfg)
    plain = step_seconds(cfg, 512, 256, n, TINY)
    full = step_seconds(cfg, 512, 256, n, TINY, checkpointing="full")
    selective = step_seconds(cfg, 512, 256, n, TINY, checkpointing="selective")
    assert plain["recompute"] == 0.0 and full["recompute"] == pytest.approx(2 * selective["recompute"])
    chunked = step_seconds(cfg, 512, 256, n, TINY, loss_chunks=8)
    assert chunked["recompute"] > 0 and chunked["compute"] == plain["compute"]
    assert step_seconds(cfg, 512, 256, n, TINY, offloaded_bytes=10**9)["offload"] == pytest.approx(2.0)
    lora = step_seconds(cfg, 512, 256, n, TINY, lora_base="nf4", trained_params=1000)
    assert lora["optimizer"] == pytest.approx(1000 * 2e-9)  # only the adapters are stepped


def _fake_measure(calls):
    def measure(device, rounds=calibrate.ROUNDS):
        calls.append(device)
        return TINY

    return measure


def test_the_calibration_is_cached_and_read_back_without_measuring(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(calibrate, "measure", _fake_measure(calls))
    path = tmp_path / "cpu.json"
    first = calibrate.calibration("cpu", path=path)
    assert len(calls) == 1 and path.exists() and first.source.startswith("measured now")
    second = calibrate.calibration("cpu", path=path)
    assert len(calls) == 1  # read from the file
    assert second.source.startswith("calibrated 2026-01-01") and str(path) in second.source
    assert second.compute == first.compute and second.optimizer == first.optimizer
    calibrate.calibration("cpu", refresh=True, path=path)  # --recalibrate
    assert len(calls) == 2


def test_a_cache_from_another_torch_is_measured_again(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(calibrate, "measure", _fake_measure(calls))
    path = tmp_path / "cpu.json"
    calibrate.calibration("cpu", path=path)
    saved = json.loads(path.read_text())
    saved["key"]["torch"] = "1.0.0"
    path.write_text(json.dumps(saved))
    calibrate.calibration("cpu", path=path)
    assert len(calls) == 2 and "'1.0.0'" in capsys.readouterr().err
    assert json.loads(path.read_text())["key"]["torch"] == torch.__version__


@pytest.mark.parametrize("text", ["{not json", '{"key": null}', "[]", ""])
def test_a_corrupted_cache_is_said_and_measured_again(tmp_path, monkeypatch, capsys, text):
    calls = []
    monkeypatch.setattr(calibrate, "measure", _fake_measure(calls))
    path = tmp_path / "cpu.json"
    path.write_text(text)
    cal = calibrate.calibration("cpu", path=path)
    assert len(calls) == 1 and cal.compute == TINY.compute
    assert "measuring it again" in capsys.readouterr().err
    calibrate.calibration("cpu", path=path)
    assert len(calls) == 1  # the file is good again


def test_a_cache_with_a_field_missing_is_measured_again(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(calibrate, "measure", _fake_measure(calls))
    path = tmp_path / "cpu.json"
    calibrate.calibration("cpu", path=path)
    saved = json.loads(path.read_text())
    del saved["calibration"]["compute"]["fp16"]
    path.write_text(json.dumps(saved))
    calibrate.calibration("cpu", path=path)
    assert len(calls) == 2


def test_the_plan_names_its_rates_and_is_the_same_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "measure", _fake_measure([]))
    path = tmp_path / "cpu.json"
    calibrate.calibration("cpu", path=path)
    choices = all_levers(["fp32", "bf16"])
    plans = [
        plan_for_budget(
            family_model(4), 400 * MIB, 256, 1, "cpu", 300 * MIB, calibrate.calibration("cpu", path=path), choices
        )
        for _ in range(2)
    ]
    assert plans[0].timing == plans[1].timing and str(path) in plans[0].timing
    assert plans[0].to_dict() == plans[1].to_dict() and "timing" in plans[0].to_dict()
    assert plans[0].reasons == plans[1].reasons  # the printed ratios too


def test_a_real_calibration_runs_and_gives_positive_rates(monkeypatch):
    """The real measurement, one round on the smallest shapes: every rate there, none negative."""
    monkeypatch.setattr(calibrate, "PRECISIONS", ("fp32", "bf16-pure"))  # fp16 is slow on a CPU: not the point
    with calibrate.small_shapes():
        cal = calibrate.measure(torch.device("cpu"), rounds=1)
    assert calibrate.CTX == 256  # the shapes are back
    assert set(cal.compute) == {"fp32", "bf16-pure"}
    assert all(min(rates) >= 0 and rates[0] > 0 for rates in cal.compute.values())
    assert cal.optimizer["adamw"] > 0 and cal.optimizer["adamw8bit"] > 0 and cal.offload > 0
    assert set(cal.recompute) == {"none", "full", "sqrt", "selective"} and cal.chunked_loss >= 0
    assert Levers().precision in cal.compute


def _timings_of(truth: Calibration, device_type: str = "cpu") -> tuple[dict, dict]:
    """The medians measure() would find on a machine whose costs are exactly `truth` (fp32 only), and the
    parameter counts it would pass to _solve: what the calibration must give back."""
    wide, narrow = calibrate.WIDE, calibrate.NARROW
    ctx, long = calibrate.CTX, calibrate.LONG_BATCH

    def fb(model, batch=1, **levers) -> float:
        parts = step_seconds(model, batch * ctx, ctx, count_params(model), truth, **levers)
        return parts["compute"] + parts["recompute"] + parts["offload"]

    def moved(model, batch=1) -> int:
        return memory.estimate(model, batch, ctx, "fp32", device=device_type, offload_activations=True).offloaded

    fixed_optimizer, around = 1e-3, 5e-4  # the optimizer's fixed part; what train_step adds around its parts
    optimizer = {m: fixed_optimizer + truth.optimizer["adamw"] * count_params(m) for m in (narrow, wide)}
    lora_model = calibrate.LORA_MODEL
    lora = {kind: fb(lora_model, long, lora_base=kind, trained_params=1) - fb(lora_model, long) for kind in LORA_BASES}
    unpacked = 2 * (count_params(lora_model) - lora_model.vocab_size * lora_model.n_embd)
    t = {f"fp32 {i}": fb(model, batch) for i, (model, batch) in enumerate(calibrate.SHAPES)}
    t |= {
        "fp32 optimizer": optimizer[wide],
        "fp32 optimizer narrow": optimizer[narrow],
        "adamw8bit optimizer": fixed_optimizer + truth.optimizer["adamw8bit"] * count_params(wide),
        "fp32 train_step": t["fp32 1"] + optimizer[wide] + around,
        f"fp32 plain x{calibrate.LONG_BATCH}": fb(narrow, calibrate.LONG_BATCH),
        f"fp32 chunked x{calibrate.LONG_BATCH}": fb(narrow, calibrate.LONG_BATCH, loss_chunks=8),
        **{f"{m} extra narrow": fb(narrow, checkpointing=m) - fb(narrow) for m in calibrate.CHECKPOINTS},
        **{f"{m} extra x{long}": fb(narrow, long, checkpointing=m) - fb(narrow, long) for m in calibrate.CHECKPOINTS},
        f"fp32 offload x{long}": fb(narrow, long, offloaded_bytes=moved(narrow, long)),
        "fp32 offload narrow": fb(narrow, offloaded_bytes=moved(narrow)),
        "offload extra narrow": fb(narrow, offloaded_bytes=moved(narrow)) - fb(narrow),  # _alone_first's
        f"offload extra x{long}": fb(narrow, long, offloaded_bytes=moved(narrow, long)) - fb(narrow, long),
        f"chunked extra x{long}": fb(narrow, long, loss_chunks=8) - fb(narrow, long),
        "offload": 2 * calibrate.OFFLOAD_BYTES / (4 * truth.offload),  # the bytes alone: faster than in a step
        **{f"lora {kind} extra": seconds for kind, seconds in lora.items()},  # _lora_paired's
        **{f"unpack {kind}": rate / 4 * 1024 * 1024 for kind, rate in truth.unpack.items()},  # alone: faster
    }
    assert t["lora nf4 extra"] - t["lora fp32 extra"] == pytest.approx(unpacked * truth.unpack["nf4"])
    params = {"fp32": count_params(wide), "fp32 narrow": count_params(narrow)}
    return t, params


def test_the_calibration_gives_back_the_costs_of_a_machine_made_of_them():
    """_solve on the timings of a machine whose costs are known: every rate, the step's fixed cost (the
    optimizer's and train_step's own), offloading's and the adapters' per block, unpacking in a step."""
    truth = replace(
        TINY,
        compute={"fp32": (1e-11, 1e-9, 1e-3)},
        optimizer_extra={"fp32": 0.0},
        recompute={"none": 0.0, "full": 1.0, "sqrt": 1.0, "selective": 0.5},
        per_step=1e-3 + 5e-4,
        recompute_per_layer={"full": 1e-3, "sqrt": 2e-3, "selective": 5e-4},
        offload_per_layer=2e-3,
        lora_saving=0.4,
    )
    t, params = _timings_of(truth)
    cal = calibrate._solve(t, {}, ["fp32"], params, "cpu")
    assert cal.compute["fp32"] == pytest.approx(truth.compute["fp32"], rel=1e-6)
    assert cal.compute["bf16"] == cal.compute["fp32"]  # a precision not measured is planned at fp32's rates
    assert cal.optimizer == pytest.approx(truth.optimizer, rel=1e-6)
    assert cal.per_step == pytest.approx(truth.per_step, rel=1e-6)
    assert cal.recompute == pytest.approx(truth.recompute, rel=1e-6)
    assert cal.recompute_per_layer == pytest.approx(truth.recompute_per_layer, rel=1e-6)
    assert cal.chunked_loss == pytest.approx(truth.chunked_loss, rel=1e-6)
    assert cal.offload == pytest.approx(truth.offload, rel=1e-6)
    assert cal.offload_per_layer == pytest.approx(truth.offload_per_layer, rel=1e-6)
    assert cal.lora_saving == pytest.approx(truth.lora_saving, rel=1e-6)
    assert cal.unpack == pytest.approx(truth.unpack, rel=1e-6)


def test_an_emulated_precision_costs_its_extra_time_per_flop():
    """A precision timed on one shape alone (many times fp32's step there: emulated, as fp16 on most CPUs) is slow
    in its matmuls: what it took there beyond fp32's, per FLOP, is added to fp32's rate per FLOP, so a step of twice
    the FLOPs costs twice that extra, and its elementwise and per-layer rates are fp32's."""
    t, params = _timings_of(replace(TINY, compute={"fp32": (1e-11, 1e-9, 1e-3)}))
    cal = calibrate._solve(t, {}, ["fp32", "fp16"], params, "cpu", emulated={"fp16": 2e-10})
    assert cal.compute["fp16"][0] == pytest.approx(cal.compute["fp32"][0] + 2e-10, rel=1e-9)
    assert cal.compute["fp16"][1:] == cal.compute["fp32"][1:]
    cfg = get_config("10m")
    fp32, fp16 = (step_seconds(cfg, 512, 256, count_params(cfg), cal, p)["compute"] for p in ("fp32", "fp16"))
    double = step_seconds(cfg, 1024, 256, count_params(cfg), cal, "fp16")["compute"]
    fp32_double = step_seconds(cfg, 1024, 256, count_params(cfg), cal, "fp32")["compute"]
    assert double - fp32_double == pytest.approx(2 * (fp16 - fp32), rel=1e-6)


def test_the_emulation_probe_gives_the_extra_seconds_per_flop_of_a_slow_precision(monkeypatch):
    """_emulated times each precision's step on EMULATION_SHAPE: one EMULATED times fp32's or slower is returned with
    (its seconds - fp32's) / the step's FLOPs; a fast one is not returned."""
    took = {"fp32": 1.0, "bf16": 1.5, "fp16": 9.0}
    current = {}

    def state(model, batch, device, precision="fp32", **levers):
        current["precision"] = precision
        return None, None

    ticks = iter(range(10**6))
    monkeypatch.setattr(calibrate, "_state", state)
    monkeypatch.setattr(calibrate, "_forward_backward", lambda s, xy, precision, device: lambda: None)
    monkeypatch.setattr(calibrate, "clock", lambda device: next(ticks) % 2 * took[current["precision"]])
    slow = calibrate._emulated(["fp32", "bf16", "fp16"], torch.device("cpu"))
    assert slow == pytest.approx({"fp16": 8.0 / calibrate._features(*calibrate.EMULATION_SHAPE)[0]}, rel=1e-12)


def test_another_precision_is_planned_at_fp32s_rates_times_its_median_ratio():
    t, params = _timings_of(replace(TINY, compute={"fp32": (1e-11, 1e-9, 1e-3)}))
    t |= {"bf16 0": 0.5 * t["fp32 0"], "bf16 1": 0.6 * t["fp32 1"], "bf16 2": 0.9 * t["fp32 2"]}
    t["bf16 optimizer"] = t["fp32 optimizer"]
    params["bf16"] = params["fp32"]
    cal = calibrate._solve(t, {}, ["fp32", "bf16"], params, "cpu")
    assert cal.compute["bf16"] == pytest.approx(tuple(0.6 * rate for rate in cal.compute["fp32"]), rel=1e-9)


def test_the_calibration_times_each_step_under_the_heap_of_the_planned_command(monkeypatch):
    """The C heap's setting is the process's and it stays: a step timed after the offloader's 128 KiB threshold
    takes its large blocks as fresh pages. Each timed call first sets what the plan's printed command runs under:
    its MALLOC_MMAP_THRESHOLD_, or the offloader's 128 KiB for a step that offloads."""
    settings = []
    monkeypatch.setattr(calibrate, "set_mmap_threshold", settings.append)
    plain = calibrate._under_the_commands_heap(lambda: settings.append("plain step"), offloading=False)
    offloaded = calibrate._under_the_commands_heap(lambda: settings.append("offloading step"), offloading=True)
    plain(), offloaded(), plain()
    command = int(MALLOC_SETTING["MALLOC_MMAP_THRESHOLD_"])
    assert settings == [command, "plain step", MMAP_THRESHOLD_BYTES, "offloading step", command, "plain step"]


@pytest.mark.parametrize("noise", ["wide step faster than narrow", "narrow step free", "8-bit step faster"])
def test_noisy_optimizer_timings_never_give_a_zero_rate(noise):
    """One round on a busy machine can time the larger AdamW step as the cheaper one, or the smaller as
    free, or the 8-bit step under the fixed part: every optimizer rate must still be positive (the step's
    time is then counted all per parameter), never 0 (which would plan the step as free)."""
    t, params = _timings_of(replace(TINY, compute={"fp32": (1e-11, 1e-9, 1e-3)}))
    if noise == "wide step faster than narrow":
        t["fp32 optimizer"] = 0.5 * t["fp32 optimizer narrow"]
    elif noise == "narrow step free":
        t["fp32 optimizer narrow"] = 0.0
    else:
        t["adamw8bit optimizer"] = 0.1 * t["fp32 optimizer"]
    cal = calibrate._solve(t, {}, ["fp32"], params, "cpu")
    assert cal.optimizer["adamw"] > 0 and cal.optimizer["adamw8bit"] > 0
    assert cal.optimizer["adamw"] * params["fp32"] <= t["fp32 optimizer"] * (1 + 1e-9)  # never more than timed


def test_a_step_costs_its_fixed_part_and_its_levers_per_block():
    cfg = get_config("10m")
    n = count_params(cfg)
    cal = replace(TINY, per_step=0.01, offload_per_layer=0.002, lora_saving=0.25)
    plain = step_seconds(cfg, 512, 256, n, cal)
    assert plain["fixed"] == 0.01 and step_seconds(cfg, 512, 256, n, TINY)["fixed"] == 0.0
    offloaded = step_seconds(cfg, 512, 256, n, cal, offloaded_bytes=10**9)["offload"]
    assert offloaded == pytest.approx(cfg.n_layer * 0.002 + 2.0)
    frozen = step_seconds(cfg, 512, 256, n, cal, lora_base="fp32", trained_params=1000)
    matmuls = sum(part_seconds(cfg, 512, 256, cal.compute["fp32"])[0].values())
    # a frozen base saves the calibrated share of the weight gradients' matmuls (a third of all matmul time)
    assert plain["compute"] - frozen["compute"] == pytest.approx(0.25 * matmuls / 3)
    assert frozen["optimizer"] < plain["optimizer"]  # only the adapters are stepped


def test_describe_states_the_typical_and_the_worst_spread_and_names_the_worst():
    # a tiny noisy timing must not stand for the calibration's spread: the median one is stated beside it
    spread = {"fp32 0": 0.04, "fp32 1": 0.06, "fp32 2": 0.05, "fp32 optimizer": 0.07, "unpack nf4": 2.5}
    line = replace(TINY, spread=spread).describe()
    assert "6% typically" in line and "at most 250%: unpack nf4" in line and line.startswith("a test's")
    assert replace(TINY, spread={}).describe() == "a test's"
