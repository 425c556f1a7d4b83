"""The planner's clock: step_seconds at calibrated rates, and the calibration cached per machine and torch."""

import json

import pytest
import torch

from minigpt import calibrate
from minigpt.model import count_params, get_config
from minigpt.plan_budget import Levers, all_levers, family_model, plan_for_budget
from minigpt.step_time import Calibration, step_seconds

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
    small = calibrate.NARROW
    monkeypatch.setattr(calibrate, "SHAPES", ((small, 1), (calibrate.WIDE, 1), (small, 2)))
    monkeypatch.setattr(calibrate, "CTX", 32)
    monkeypatch.setattr(calibrate, "OFFLOAD_BYTES", 2**20)
    monkeypatch.setattr(calibrate, "QUANTIZED_SHAPE", (64, 64))
    monkeypatch.setattr(calibrate, "PRECISIONS", ("fp32", "bf16-pure"))  # fp16 is slow on a CPU: not the point
    cal = calibrate.measure(torch.device("cpu"), rounds=1)
    assert set(cal.compute) == {"fp32", "bf16-pure"}
    assert all(min(rates) >= 0 and rates[0] > 0 for rates in cal.compute.values())
    assert cal.optimizer["adamw"] > 0 and cal.optimizer["adamw8bit"] > 0 and cal.offload > 0
    assert set(cal.recompute) == {"none", "full", "sqrt", "selective"} and cal.chunked_loss >= 0
    assert Levers().precision in cal.compute
