"""`python -m benchmarks.run_all --quick` runs every benchmark and writes RESULTS.md and its plots."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [
    "1. Loop speed",
    "2. Model FLOPs utilization",
    "3. Precision modes",
    "3b. bf16 against fp32 at 1,000 steps",
    "4. Gradient checkpointing",
    "5. Gradient accumulation",
    "6. Memory prediction grid",
    "7. torch.compile",
    "9. The optimizer state and the gradients",
    "9b. 8-bit AdamW: val loss",
    "10. LoRA and QLoRA fine-tuning",
    "11. The loss head and activation offloading",
    "13. The planner's clock: predicted against measured step time",
]
PLOTS = [
    "loop_overhead.png",
    "mfu.png",
    "precision_modes.png",
    "checkpointing.png",
    "accumulation.png",
    "memory_grid.png",
    "compile.png",
    "optimizers.png",
    "optimizer_quality.png",
    "lora.png",
    "loss_offload.png",
]


def test_quick_run_writes_results_and_plots(quick_benchmark_run):
    # conftest starts the run when the tests are collected and runs this test last (see quick_benchmark_run)
    run, output = quick_benchmark_run, quick_benchmark_run.output.read_text()
    assert run.proc.returncode == 0, output[-6000:]
    results = (run.results / "RESULTS.md").read_text()
    for heading in SECTIONS:
        assert f"## {heading}" in results, heading
    for row in ("| date ", "| torch ", "| device "):  # where and when the numbers were measured
        assert row in results
    assert "QUICK RUN" in results
    assert "crashed" not in results
    # Every target is judged, PASS or FAIL, in the summary and on the terminal.
    assert results.count("| PASS ") + results.count("| FAIL ") >= 8
    assert "PASS" in output or "FAIL" in output
    for name in PLOTS:
        png = run.results / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"]({name})" in results


def run_diagnostic(module: str, *args: str) -> subprocess.CompletedProcess:
    """python -m benchmarks.<module> ARGS in a fresh process on one thread; it must succeed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,  # a guard against hangs only
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_selective_overhead_diagnostic_times_every_mode():
    done = run_diagnostic("selective_overhead", "--preset", "tiny", "--batch", "2", "--ctx", "16", "--turns", "1")
    rows = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in done.stdout.splitlines()[3:]}
    assert list(rows) == ["none", "selective", "save-all", "full"]
    assert rows["none"] == "1.000"  # none over itself


def test_optimizer_call_path_diagnostic_fits_the_calls_and_times_fresh_processes():
    args = ("--preset", "tiny", "--turns", "2", "--processes", "1", "--quick", "--floor")
    step_table, floor_table = run_diagnostic("optimizer_call_path", *args).stdout.split("\n\n")
    rows = {line.split("|")[1].strip(): line.split("|")[2:4] for line in step_table.splitlines()[3:]}
    assert rows["fused AdamW step"][1].strip() == "1.00"  # fused AdamW over itself
    assert int(rows["its compiled calls a step"][0]) > 1  # tiny's quantized tensors: several calls, several sizes
    for name in ("per call (fitted)", "per value (fitted)", "fused AdamW in 1 fresh processes"):
        assert name in rows, name
    floor = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in floor_table.splitlines()[3:]}
    assert list(floor) == [
        "the fused pass (AdamW8bit compiled)",
        "one loop, scales known (a stand-in)",
        "AdamW with fp32 moments, compiled",
        "torch fused AdamW",
    ]
    assert floor["torch fused AdamW"] == "1.00"  # the reference over itself


def test_the_floors_stand_ins_update_as_adamw8bit_does_where_the_scales_hold():
    """The floor's passes time the real update: the one-loop stand-in writes fused_update_'s weight and codes when
    the new scales are the old ones, and the fp32 pass writes what adamw_update_ writes."""
    from benchmarks.optimizer_call_path import fp32_update_, one_loop_update_
    from minigpt.optim import adamw8bit, codes

    g = torch.Generator().manual_seed(0)
    param, grad = torch.randn(4, 256, generator=g), torch.randn(4, 256, generator=g)
    m_codes, m_scales = codes.quantize(0.1 * grad, codes.M_CODE)
    v_codes, v_scales = codes.quantize(0.01 * grad * grad, codes.V_CODE)
    # grad = 0 and beta1 = beta2 = 1 (hyper[1] = hyper[3] = 0) keep m and v, so their scales stay the block maxima
    hyper = torch.tensor([0.99, 0.0, 1.0, 0.0, 1.0, 1e-8, -1e-3])
    state = [t.clone() for t in (param, m_codes.view(4, 256), m_scales, v_codes.view(4, 256), v_scales)]
    expected = [t.clone() for t in state]
    adamw8bit.fused_update_(expected[0], torch.zeros_like(grad), *expected[1:], hyper)
    one_loop_update_(state[0], torch.zeros_like(grad), *state[1:], hyper)
    torch.testing.assert_close(state[0], expected[0], rtol=1e-6, atol=0)  # a few fp32 ulps: the same formulas
    assert (state[1].int() - expected[1].int()).abs().max() <= 1  # a code may differ by one at a rounding tie
    assert (state[3].int() - expected[3].int()).abs().max() <= 1

    p32, m32, v32 = param.clone(), 0.1 * grad, 0.01 * grad * grad
    p_ref, m_ref, v_ref = param.clone(), m32.clone(), v32.clone()
    fp32_update_(p32, grad, m32, v32, torch.tensor(adamw8bit.hyper_parameters(3, 1e-3, (0.9, 0.999), 1e-8, 0.01)))
    adamw8bit.adamw_update_(p_ref, grad, m_ref, v_ref, 3, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    for got, want in ((p32, p_ref), (m32, m_ref), (v32, v_ref)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-9)


def test_a_line_through_calls_of_one_size_is_refused():
    from benchmarks.optimizer_call_path import fit_line

    assert fit_line([(100, 1.0), (300, 2.0), (200, 1.5)]) == pytest.approx((0.5, 0.005))
    with pytest.raises(ValueError, match="two sizes"):
        fit_line([(100, 1.0), (100, 1.2)])
