"""`python -m benchmarks.run_all --quick` runs every benchmark and writes RESULTS.md and its plots."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    done = run_diagnostic("optimizer_call_path", "--preset", "tiny", "--turns", "2", "--processes", "1", "--quick")
    rows = {line.split("|")[1].strip(): line.split("|")[2:4] for line in done.stdout.splitlines()[3:]}
    assert rows["fused AdamW step"][1].strip() == "1.00"  # fused AdamW over itself
    assert int(rows["its compiled calls a step"][0]) > 1  # tiny's quantized tensors: several calls, several sizes
    for name in ("per call (fitted)", "per value (fitted)", "fused AdamW in 1 fresh processes"):
        assert name in rows, name


def test_a_line_through_calls_of_one_size_is_refused():
    from benchmarks.optimizer_call_path import fit_line

    assert fit_line([(100, 1.0), (300, 2.0), (200, 1.5)]) == pytest.approx((0.5, 0.005))
    with pytest.raises(ValueError, match="two sizes"):
        fit_line([(100, 1.0), (100, 1.2)])
