"""Grade a folder of learner submissions into grades.csv: `make grade SUBMISSIONS=dir/`.

Each subfolder of SUBMISSIONS is one learner, holding their chNN_*.py answers (in an exercises/ folder, or
directly). Each is graded by `pytest exercises/ --answers-dir ...` in its own process, with the per-test
timeout, so no learner's code is ever imported into another's grading. grades.csv has one row per
learner: their points per exercise and their total.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def answers_folder(submission: Path) -> Path:
    """Where a submission keeps its chNN_*.py files: its exercises/ folder if it has one, else itself."""
    inner = submission / "exercises"
    return inner if inner.is_dir() else submission


def grade_one(submission: Path, timeout_s: float, session_timeout_s: float) -> dict | None:
    """grade.json of one submission, graded in a fresh process (None if that process did not finish)."""
    with tempfile.TemporaryDirectory() as tmp:
        grade = Path(tmp) / "grade.json"
        cmd = [sys.executable, "-m", "pytest", "exercises/", "-q", "-p", "no:cacheprovider"]
        cmd += ["--answers-dir", str(answers_folder(submission)), "--grade-json", str(grade)]
        cmd += ["--exercise-timeout", str(timeout_s)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        try:
            subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=session_timeout_s)
        except subprocess.TimeoutExpired:  # a hang the per-test timer could not interrupt (inside C code)
            return None
        return json.loads(grade.read_text()) if grade.exists() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="a folder with one subfolder per learner")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="the CSV to write (grades.csv)")
    parser.add_argument("--exercise-timeout", type=float, default=60.0, help="seconds per test (60)")
    parser.add_argument("--session-timeout", type=float, default=1800.0, help="seconds per learner, all in (1800)")
    args = parser.parse_args(argv)
    learners = sorted(p for p in args.submissions.iterdir() if p.is_dir())
    if not learners:
        parser.error(f"{args.submissions} has no submission folders")
    grades = {}
    for learner in learners:
        grades[learner.name] = grade_one(learner.resolve(), args.exercise_timeout, args.session_timeout)
        total = grades[learner.name]["earned"] if grades[learner.name] else 0
        print(f"{learner.name}: {total:g}", flush=True)
    exercises = sorted(
        {e for g in grades.values() if g for e in g["exercises"]},
        key=lambda e: tuple(int(p) for p in e.split(".")),
    )
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["learner", *exercises, "total"])
        for name, g in grades.items():
            points = [g["exercises"][e]["earned"] if g and e in g["exercises"] else 0 for e in exercises]
            writer.writerow([name, *(f"{p:g}" for p in points), f"{sum(points):g}"])
    print(f"wrote {args.out} ({len(grades)} learners)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
