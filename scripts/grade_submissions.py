"""Grade a folder of learner submissions into grades.csv: `make grade SUBMISSIONS=dir/`.

Each subfolder of SUBMISSIONS is one learner, holding their chNN_*.py answers (in an exercises/ folder, or
directly). Each is graded by `pytest exercises/ --answers-dir ...` in its own process, which runs their answers
in worker processes of its own and writes grade.json. That file is read back against the exercise table of the
tests (minigpt.grading.score.read_grade): points are capped at what each exercise is worth, and a grade.json
that is missing, malformed or names an unknown exercise counts as a crash, never a reason to stop.

grades.csv always gets one row per learner: their points per exercise, their total, a status and a note.
    graded     every exercise was graded
    timed out  an exercise ran past the exercise timeout (it scores 0; the note names it), or the learner's
               whole grading ran past --session-timeout (no grade: 0 points)
    crashed    the grader's run ended without a grade it could read, or with one that disagrees with its exit
               status (0 points; the note says why)
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minigpt.grading.score import GradeFileError, exercise_table, read_grade  # noqa: E402 - after the path


@dataclass
class Grade:
    """One learner's row of grades.csv."""

    status: str
    points: dict[str, float] = field(default_factory=dict)
    note: str = ""


def answers_folder(submission: Path) -> Path:
    """Where a submission keeps its chNN_*.py files: its exercises/ folder if it has one, else itself."""
    inner = submission / "exercises"
    return inner if inner.is_dir() else submission


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else "no output"


def wait_awake(process: subprocess.Popen, timeout_s: float) -> int:
    """process.wait(timeout_s), continuing the process every half second: an answer that stops its grader
    (SIGSTOP, found through /proc) would otherwise hold the whole class until the session timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return process.wait(timeout=min(0.5, max(deadline - time.monotonic(), 0.001)))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
            if hasattr(signal, "SIGCONT"):
                try:
                    os.kill(process.pid, signal.SIGCONT)
                except OSError:
                    pass


def grade_one(submission: Path, table: dict[str, float], timeout_s: float, session_timeout_s: float) -> Grade:
    """Grade one submission in a fresh grader process; whatever happens, a Grade comes back."""
    with tempfile.TemporaryDirectory() as tmp:
        grade_json, output = Path(tmp) / "grade.json", Path(tmp) / "output.txt"
        cmd = [sys.executable, "-m", "pytest", "exercises/", "-q", "-p", "no:cacheprovider"]
        cmd += ["--answers-dir", str(answers_folder(submission)), "--grade-json", str(grade_json)]
        cmd += ["--exercise-timeout", str(timeout_s)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with open(output, "w") as out:
            grader = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
            try:
                code = wait_awake(grader, session_timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(grader.pid, signal.SIGKILL)  # the grader; its workers end with it
                grader.wait()
                return Grade("timed out", note=f"grading ran past {session_timeout_s:g} s and was stopped: no grade")
        if code not in (0, 1):  # pytest's "all passed" and "some failed": any other status, it did not finish
            return Grade("crashed", note=f"the grader did not finish (exit status {code}): {_last_line(output)}")
        try:
            points, timed_out = read_grade(grade_json, table)
        except GradeFileError as error:
            return Grade("crashed", note=f"{error} (the grader's exit status {code}: {_last_line(output)})")
    if (code == 0) != (points == table):
        return Grade("crashed", note=f"grade.json disagrees with the grader's exit status {code}: not the grader's")
    if timed_out:
        return Grade("timed out", points, f"timed out after {timeout_s:g} s, 0 points: {', '.join(timed_out)}")
    return Grade("graded", points)


def write_csv(path: Path, table: dict[str, float], grades: dict[str, Grade]) -> None:
    """learner, one column per exercise, total, status, note: one row per learner."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["learner", *table, "total", "status", "note"])
        for name, g in grades.items():
            points = [g.points.get(e, 0.0) for e in table]
            writer.writerow([name, *(f"{p:g}" for p in points), f"{sum(points):g}", g.status, g.note])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="a folder with one subfolder per learner")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="the CSV to write (grades.csv)")
    parser.add_argument("--exercise-timeout", type=float, default=60.0, help="seconds per test (60)")
    parser.add_argument(
        "--session-timeout", type=float, help="seconds per learner, all in (default: 300 + 2 x timeout per exercise)"
    )
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder")
    learners = sorted(p for p in args.submissions.iterdir() if p.is_dir())
    if not learners:
        parser.error(f"{args.submissions} has no submission folders (one per learner)")
    table = exercise_table(ROOT / "exercises")
    session_timeout = args.session_timeout or 300 + 2 * len(table) * args.exercise_timeout
    grades: dict[str, Grade] = {}
    for learner in learners:
        try:
            grades[learner.name] = grade_one(learner.resolve(), table, args.exercise_timeout, session_timeout)
        except Exception as error:  # noqa: BLE001 - one learner's trouble never costs the others their row
            grades[learner.name] = Grade("crashed", note=f"{type(error).__name__}: {error}")
        g = grades[learner.name]
        print(f"{learner.name}: {sum(g.points.values()):g} ({g.status})", flush=True)
    write_csv(args.out, table, grades)
    print(f"wrote {args.out} ({len(grades)} learners)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
