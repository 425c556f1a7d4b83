"""The score: points per exercise from the grader's own record of each test, the files that carry it (grade.json,
Gradescope's results.json), and the exercise table that caps what any grade file may claim.

An exercise that timed out scores 0, whatever its other tests did. `make grade` reads each learner's grade.json
back through read_grade(), which trusts nothing in it beyond the exercise table of the tests themselves.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path


def exercise_key(exercise: str) -> tuple:
    """Sort key: "4.10" after "4.9"."""
    return tuple(int(p) if p.isdigit() else p for p in exercise.split("."))


def grade(results: dict) -> dict:
    """Per-exercise points earned and possible, tests passed, each test's status and failure message, and the
    totals (what grade.json holds). `results`: test id -> {"exercise", "points", "status", "message"}."""
    exercises: dict[str, dict] = {}
    for nodeid, r in results.items():
        e = exercises.setdefault(
            r["exercise"],
            {
                "earned": 0.0,
                "possible": 0.0,
                "tests_passed": 0,
                "tests": 0,
                "passed": True,
                "results": {},
                "messages": {},
            },
        )
        e["possible"] += r["points"]
        e["tests"] += 1
        e["results"][nodeid] = r["status"]
        if r["message"]:
            e["messages"][nodeid] = r["message"]
        if r["status"] == "passed":
            e["earned"] += r["points"]
            e["tests_passed"] += 1
        else:
            e["passed"] = False
    for e in exercises.values():
        if "timeout" in e["results"].values():
            e["earned"] = 0.0  # a timed-out exercise scores 0
    ordered = {k: exercises[k] for k in sorted(exercises, key=exercise_key)}
    return {
        "earned": sum(e["earned"] for e in ordered.values()),
        "possible": sum(e["possible"] for e in ordered.values()),
        "exercises": ordered,
    }


def status_word(e: dict) -> str:
    """One word for an exercise of grade(): passed, partly, failed, not done, timeout, error, ..."""
    statuses = set(e["results"].values())
    for word in ("timeout", "error", "not done", "failed", "skipped", "not run"):
        if word in statuses:
            return word if e["tests_passed"] == 0 or word != "failed" else "partly"
    return "passed"


def score_rows(g: dict) -> list[list[str]]:
    """The score table's rows (exercise, points, tests passed, status) and the total."""
    rows = [
        [ex, f"{e['earned']:g}/{e['possible']:g}", f"{e['tests_passed']}/{e['tests']}", status_word(e)]
        for ex, e in g["exercises"].items()
    ]
    return rows + [["total", f"{g['earned']:g}/{g['possible']:g}", "", ""]]


def gradescope_results(results: dict) -> dict:
    """Gradescope's autograder results.json: one entry per test (its exercise is its number), and the total.

    Format: https://gradescope-autograders.readthedocs.io/en/latest/specs/
    """
    g = grade(results)
    tests = []
    for nodeid, r in sorted(results.items(), key=lambda kv: (exercise_key(kv[1]["exercise"]), kv[0])):
        passed = r["status"] == "passed"
        counted = passed and "timeout" not in g["exercises"][r["exercise"]]["results"].values()
        tests.append(
            {
                "name": f"Exercise {r['exercise']}: {nodeid.split('::')[-1]}",
                "number": r["exercise"],
                "score": r["points"] if counted else 0.0,
                "max_score": r["points"],
                "status": "passed" if passed else "failed",
                "output": r["message"] or r["status"],
                "visibility": "visible",
            }
        )
    return {
        "score": g["earned"],
        "output": f"{g['earned']:g}/{g['possible']:g} points",
        "visibility": "visible",
        "stdout_visibility": "visible",
        "tests": tests,
    }


# ----------------------------------------------------------------------------------------------------------
# The exercise table, and grade files read back against it


def exercise_table(exercises_dir: Path) -> dict[str, float]:
    """{exercise: points possible}, read from the @pytest.mark.exercise markers of the test files (parsed,
    not imported)."""
    table: dict[str, float] = {}
    for path in sorted(exercises_dir.glob("test_ch*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for mark in node.decorator_list:
                if isinstance(mark, ast.Call) and ast.unparse(mark.func) == "pytest.mark.exercise":
                    exercise = ast.literal_eval(mark.args[0])
                    points = next((ast.literal_eval(k.value) for k in mark.keywords if k.arg == "points"), 1)
                    table[exercise] = table.get(exercise, 0.0) + float(points)
    return {k: table[k] for k in sorted(table, key=exercise_key)}


class GradeFileError(ValueError):
    """A grade file that is missing, malformed, or claims what the exercise table does not hold."""


def read_grade(path: Path, table: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    """({exercise: points, capped to [0, its points in the table]}, exercises that timed out) from a grade.json.

    Raises GradeFileError for a missing or malformed file, or one that names an exercise not in the table.
    """
    if not path.is_file():
        raise GradeFileError("no grade.json was written")
    if path.stat().st_size > 20_000_000:
        raise GradeFileError("grade.json is too large to be one")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise GradeFileError(f"grade.json is not JSON ({error})") from None
    exercises = data.get("exercises") if isinstance(data, dict) else None
    if not isinstance(exercises, dict):
        raise GradeFileError("grade.json has no table of exercises")
    unknown = sorted(set(exercises) - set(table))
    if unknown:
        raise GradeFileError(f"grade.json names exercises the course does not have: {', '.join(map(str, unknown))}")
    points, timed_out = {}, []
    for exercise, possible in table.items():
        entry = exercises.get(exercise, {})
        earned = entry.get("earned", 0.0) if isinstance(entry, dict) else None
        if not isinstance(earned, (int, float)) or isinstance(earned, bool) or not math.isfinite(earned):
            raise GradeFileError(f"grade.json: exercise {exercise} has no number of points")
        points[exercise] = min(max(float(earned), 0.0), possible)
        results = entry.get("results", {}) if isinstance(entry, dict) else {}
        if isinstance(results, dict) and "timeout" in results.values():
            timed_out.append(exercise)
    return points, timed_out
