"""scripts/gpu_check.py without a GPU: one line and exit 0; its checks' plumbing and report on the CPU."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.script_loader import SCRIPTS, load_script

gpu_check = load_script("gpu_check")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what the script says where there is no GPU")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "gpu_check.py"), "--out", str(out)], capture_output=True, text=True, env=ENV
    )
    assert done.returncode == 0
    assert done.stdout.strip().splitlines() == [done.stdout.strip()]  # one line
    assert "no CUDA GPU" in done.stdout and "nothing was checked" in done.stdout
    assert not out.exists()  # nothing checked, nothing written


def test_on_the_cpu_every_check_reports_and_a_failing_one_stops_none_of_the_others(tmp_path, capsys, monkeypatch):
    """Every default check runs at tiny sizes; plan_budget_auto is made to fail (it takes 30 s here anyway).

    The checks' limits are sized for a GPU; here they are only guards against a hang, so 10x (a busy 2-core
    CPU emulating fp16 is that much slower than a quiet one)."""
    slack = [dataclasses.replace(c, limit_s=10 * c.limit_s) for c in gpu_check.CHECKS]
    monkeypatch.setattr(gpu_check, "CHECKS", slack)
    monkeypatch.setattr(gpu_check, "BY_NAME", {c.name: c for c in slack})
    argv = [
        "--device",
        "cpu",
        "--in-process",
        "--out",
        str(tmp_path),
        "--budget-s",
        str(10 * gpu_check.DEFAULT_BUDGET_S),
    ]
    code = gpu_check.main([*argv, "--fail", "plan_budget_auto"])
    assert code == 1  # not green: one check erred
    report = json.loads((tmp_path / "report.json").read_text())
    names = [c.name for c in gpu_check.CHECKS if not c.optional]
    assert [r["name"] for r in report["checks"]] == names  # one entry per check, in order, after the failure too
    verdicts = {r["name"]: r["verdict"] for r in report["checks"]}
    assert (
        verdicts["plan_budget_auto"] == "ERROR"
        and "injected" in report["checks"][names.index("plan_budget_auto")]["note"]
    )
    assert verdicts["nccl_ddp"] == verdicts["nccl_fsdp_bf16"] == verdicts["memory_snapshot"] == "SKIP"
    ran = [n for n in names if verdicts[n] not in ("SKIP", "ERROR")]
    assert ran and all(verdicts[n] == "PASS" for n in ran), verdicts  # the tiny sizes agree with the CPU tests
    for r in report["checks"]:
        assert r["seconds"] >= 0 and r["limit_s"] > 0
        for row in r.get("rows", []):  # every comparison names where its tolerance comes from
            assert row["source"]
    assert report["torch"] == torch.__version__ and report["counts"]["ERROR"] == 1
    md = (tmp_path / "report.md").read_text()
    assert all(f"| {n} |" in md for n in names) and "| plan_budget_auto | ERROR |" in md
    assert "## allocator_meter: PASS" in md and "PEAK_TOLERANCE" in md
    assert "NCCL checks (nccl_ddp, nccl_fsdp_bf16) skipped" in capsys.readouterr().out


def test_each_check_in_its_own_process_a_hang_is_killed_at_its_limit_and_the_next_still_runs(tmp_path, monkeypatch):
    hung = gpu_check.BY_NAME["offload_gradients"]
    monkeypatch.setitem(gpu_check.BY_NAME, hung.name, gpu_check.Check(hung.name, hung.run, limit_s=4))
    monkeypatch.setitem(
        gpu_check.BY_NAME, "memory_lever_8bit", dataclasses.replace(gpu_check.BY_NAME["memory_lever_8bit"], limit_s=600)
    )
    argv = ["--device", "cpu", "--out", str(tmp_path), "--only", hung.name, "memory_lever_8bit"]
    code = gpu_check.main([*argv, "--hang", hung.name])
    report = json.loads((tmp_path / "report.json").read_text())
    verdicts = [(r["name"], r["verdict"]) for r in report["checks"]]
    assert verdicts == [(hung.name, "TIMEOUT"), ("memory_lever_8bit", "PASS")] and code == 1
    assert report["checks"][0]["seconds"] < 15
    assert not list(tmp_path.glob(".*.json"))  # the children's result files are read and removed


def test_a_chapter_runs_with_its_scale_switched():
    source = (SCRIPTS.parent / "chapters" / "09_toolbox.md").read_text(encoding="utf-8")
    full = gpu_check.set_scale(source, "full")
    assert 'SCALE = "full"\n' in full and 'SCALE = "small"' not in full
    assert len(full.splitlines()) == len(source.splitlines())
    with pytest.raises(ValueError, match="one SCALE line"):
        gpu_check.set_scale("x = 1\n", "full")
    assert [c.name for c in gpu_check.CHECKS if c.optional] == [f"chapter_{n}_full" for n in ("03", "04", "09", "10")]


def test_the_default_run_fits_its_time_budget():
    """Under 10 minutes on one GPU: the default checks share DEFAULT_BUDGET_S, under 600 s (the chapters, asked
    for with --chapters, have CHAPTER_LIMIT_S each on top)."""
    assert gpu_check.DEFAULT_BUDGET_S < 600
    assert all(c.limit_s <= gpu_check.DEFAULT_BUDGET_S for c in gpu_check.CHECKS if not c.optional)


def test_a_check_the_budget_left_unrun_is_not_green(tmp_path, capsys):
    code = gpu_check.main(["--device", "cpu", "--out", str(tmp_path), "--budget-s", "1", "--only", "memory_snapshot"])
    assert code == 1 and "not green: memory_snapshot" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # argparse's one-line error
        gpu_check.main(["--device", "cpu", "--budget-s", "-1"])
