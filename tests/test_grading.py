"""The grading machinery: exercises/ is generated from solutions/, the reference answers pass every test,
the untouched stubs fail every test with their hint, every mistake of the wrong-answer suite fails the test
meant to catch it (with the property, the values and the hint), a hanging answer costs one timeout and the
rest still run, the classroom formats agree with the grade, and the exercise notebooks stop at their first
check cell. Answers that attack the grader: tests/test_grading_attacks.py.

The grader runs in a subprocess (`python -m pytest exercises/ ...`), as a learner or a classroom runs it.
"""

import ast
import csv
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from grading_runs import ANSI_COLOR, ROOT, GraderRun, Limiter, Mistake, Run, answers_with, statuses
from script_loader import load_script
from tabulate import tabulate
from wrong_answers.classic import MISTAKES

# The runs below are whole pytest sessions and notebook executions, started together: minutes on a busy CPU.
pytestmark = pytest.mark.timeout(3600)


make_exercises = load_script("make_exercises")


# ----------------------------------------------------------------------------------------------------------
# One source of truth


def test_exercises_are_generated_from_the_solutions():
    problems = make_exercises.out_of_date(ROOT)
    assert not problems, f"{problems}: run python scripts/make_exercises.py"


def test_check_fails_when_a_solution_changes(tmp_path):
    for folder in ("solutions", "exercises"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    assert make_exercises.main(["--check", "--root", str(tmp_path)]) == 0
    solution = tmp_path / "solutions" / "ch04_fp16_gradscaler.py"
    solution.write_text(re.sub(r"# BEGIN SOLUTION 4.2: .*", "# BEGIN SOLUTION 4.2: NEW HINT", solution.read_text()))
    assert make_exercises.main(["--check", "--root", str(tmp_path)]) == 1
    assert make_exercises.main(["--root", str(tmp_path)]) == 0  # regenerate
    assert make_exercises.main(["--check", "--root", str(tmp_path)]) == 0
    stub = (tmp_path / "exercises" / "ch04_fp16_gradscaler.py").read_text()
    assert '"Exercise 4.2: NEW HINT"' in stub
    assert "- see chapters/04_fp16_gradscaler.ipynb" in stub


def test_stubs_hold_no_solution_code():
    for path in sorted((ROOT / "solutions").glob("ch*_*.py")):
        solution, stub = path.read_text(), (ROOT / "exercises" / path.name).read_text()
        assert "SOLUTION" not in stub, f"exercises/{path.name} still has a solution marker"
        stubs = re.findall(r"^\s+raise NotImplementedError\(\s+.Exercise ", stub, re.M)
        assert len(stubs) == solution.count("# BEGIN SOLUTION "), f"exercises/{path.name}: one stub per region"


def test_generator_rejects_bad_regions():
    source = "def f():\n    # BEGIN SOLUTION 1.1: hint\n    return 1\n"
    with pytest.raises(ValueError, match="no '# END SOLUTION'"):
        make_exercises.stub_code(source, "chapters/01_x.ipynb")
    source = "# BEGIN SOLUTION 1.1: hint\nX = 1\n# END SOLUTION\n"
    with pytest.raises(ValueError, match="inside a function body"):
        make_exercises.stub_code(source, "chapters/01_x.ipynb")


# ----------------------------------------------------------------------------------------------------------
# Solutions pass, stubs fail


class NotebookRun(Run):
    """`jupyter nbconvert --execute` of an exercise notebook; result() waits: (exit code, output)."""

    def __init__(self, limiter: Limiter, notebook: Path, out_dir: Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        cmd = [
            sys.executable,
            "-m",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--output-dir",
            str(out_dir),
            "--ExecutePreprocessor.timeout=300",
            "--ExecutePreprocessor.startup_timeout=300",  # a kernel starts slowly on a busy machine
            str(notebook),
        ]
        super().__init__(cmd, env, out_dir / "output.txt", limiter)

    def result(self) -> tuple[int, str]:
        self.wait()
        if self.proc.returncode != 0 and KERNEL_DIED_STARTING in self.output.read_text():
            # the kernel died before it ran a cell (seen once in a full run, with a dozen kernels starting at once):
            # the notebook never ran, so it is run again, alone, once
            self.start()
            self.proc.wait()
        return self.proc.returncode, ANSI_COLOR.sub("", self.output.read_text())


KERNEL_DIED_STARTING = "Kernel died before replying to kernel_info"
EXERCISE_NOTEBOOKS = sorted(p.name for p in (ROOT / "solutions").glob("ch*.ipynb"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, grader_limiter):
    """Every grader run this file checks, queued together: the solutions, the stubs, the notebooks, the
    wrong-answer rounds (conftest's wrong_answer_runs) and a hang."""
    limiter = grader_limiter
    started: dict = {}
    tmp = tmp_path_factory.mktemp("solutions")
    started["solutions"] = GraderRun(limiter, tmp, "--solutions", "--gradescope", str(tmp / "results.json"))
    tmp = tmp_path_factory.mktemp("stubs")
    started["stubs"] = GraderRun(limiter, tmp, "--gradescope", str(tmp / "results.json"))
    for name in EXERCISE_NOTEBOOKS:  # the slowest: queued early
        started[name] = NotebookRun(limiter, ROOT / "exercises" / name, tmp_path_factory.mktemp("notebooks"))
    tmp = tmp_path_factory.mktemp("hang")
    folder = answers_with(tmp / "answers", {"hang": HANGING_SEARCH})
    started["hang"] = GraderRun(
        limiter,
        tmp,
        "--answers-dir",
        str(folder),
        "--exercise-timeout",
        "5",
        "-k",
        "7.1 or test_planner_rules",
        files=("exercises/test_ch07_fitting_it_together.py",),
    )
    tmp = tmp_path_factory.mktemp("submissions")
    answers_with(
        tmp / "submissions" / "ada" / "exercises", {"accum without world_size": MISTAKES["accum without world_size"]}
    )
    (tmp / "submissions" / "bo").mkdir()  # handed in nothing
    cmd = [sys.executable, "scripts/grade_submissions.py", str(tmp / "submissions"), "--out", str(tmp / "grades.csv")]
    started["grade submissions"] = Run(cmd, {**os.environ, "OMP_NUM_THREADS": "1"}, tmp / "output.txt", limiter)
    started["grade submissions"].csv = tmp / "grades.csv"
    return started


@pytest.fixture(scope="module")
def solutions_run(runs):
    return runs["solutions"].result()


@pytest.fixture(scope="module")
def stubs_run(runs):
    return runs["stubs"].result()


def test_every_test_passes_against_the_solutions(solutions_run):
    output, grade = solutions_run
    failed = {t: s for t, s in statuses(grade).items() if s != "passed"}
    assert not failed, f"{failed}\n{output[-4000:]}"
    assert grade["earned"] == grade["possible"] > 0 and grade["answers"] == "solutions"
    assert len(grade["exercises"]) >= 7 * 3, "3 to 6 exercises per chapter"


def test_every_test_fails_against_the_stubs_with_its_hint(stubs_run):
    output, grade = stubs_run
    assert set(statuses(grade).values()) == {"not done"}, statuses(grade)
    assert grade["earned"] == 0 and grade["answers"] == "exercises"
    # One line per failure: the exercise, its hint and its chapter; no traceback.
    assert "Exercise 4.2 not done yet: " in output and "- see chapters/04_fp16_gradscaler.ipynb" in output
    assert "Traceback" not in output and "raise NotImplementedError" not in output


def test_the_score_table_and_grade_json(runs, stubs_run, solutions_run):
    assert runs["solutions"].proc.returncode == 0 and runs["stubs"].proc.returncode == 1, "the exit status follows"
    output, grade = solutions_run
    assert "exercise    points    tests passed    status" in output
    assert "total" in output
    exercise = grade["exercises"]["4.1"]
    assert set(exercise) == {"earned", "possible", "tests_passed", "tests", "passed", "results", "messages"}
    assert exercise["passed"] is True and exercise["earned"] == exercise["possible"]
    assert sum(e["possible"] for e in grade["exercises"].values()) == grade["possible"]
    assert stubs_run[1]["possible"] == grade["possible"], "the stubs and the solutions are graded by the same tests"


# ----------------------------------------------------------------------------------------------------------
# The wrong-answer suite: mistakes learners make, each written into a copy of solutions/ and graded


@pytest.fixture(scope="module")
def wrong_runs(wrong_answer_runs) -> dict[str, dict]:
    """grade.json of the grader run (the stored outcomes, as `pytest exercises/` grades) that holds each mistake."""
    return {name: runs["stored"].result()[1] for name, runs in wrong_answer_runs["classic"].items()}


def _caught_by(grade: dict, exercise: str) -> list[tuple[str, str, str]]:
    """(test, status, message) of each test of the exercise that did not pass."""
    e = grade["exercises"][exercise]
    return [
        (node.split("::")[-1], status, e["messages"].get(node, ""))
        for node, status in e["results"].items()
        if status != "passed"
    ]


@pytest.mark.parametrize("mistake", MISTAKES)
def test_the_grader_catches(mistake, wrong_runs):
    m = MISTAKES[mistake]
    grade = wrong_runs[mistake]
    result = grade["exercises"][m.exercise]
    assert result["earned"] < result["possible"] and not result["passed"], f"{mistake} passed: {result}"
    caught = {test: (status, message) for test, status, message in _caught_by(grade, m.exercise)}
    assert m.test in caught, f"{mistake}: caught by {sorted(caught)}, not by {m.test}"
    status, message = caught[m.test]
    # A finished but wrong answer: a failure (not a crash of the grader), with what went wrong and the hint.
    assert status == "failed", f"{mistake}: {m.test} is {status!r}: {message}"
    assert f"Exercise {m.exercise}" in message and "\n  Hint: " in message, f"{mistake}: {message}"


def test_padding_is_what_separates_the_mean_of_means(wrong_runs):
    """Strict, and fair: the mean of micro-batch means is right without padding, so that test passes."""
    grade = statuses(wrong_runs["mean of micro-batch means with padding"])
    assert grade["test_equal_micro_batches_match_one_big_batch"] == "passed"


def test_the_wrong_answer_suite_covers_every_exercise(solutions_run, wrong_runs, capsys):
    """At least 3 mistakes per exercise, 72 in all; prints the table of mistakes and what caught each."""
    per_exercise = {e: 0 for e in solutions_run[1]["exercises"]}
    for m in MISTAKES.values():
        per_exercise[m.exercise] += 1
    rows = []
    for name, m in MISTAKES.items():
        caught = _caught_by(wrong_runs[name], m.exercise)
        first = next((msg for test, _, msg in caught if test == m.test), "")
        rows.append([m.exercise, name, m.test, textwrap.shorten(first.split("\n")[0], 90)])
    with capsys.disabled():
        print(f"\n\nThe wrong-answer suite: {len(MISTAKES)} mistakes, what caught each\n")
        print(tabulate(rows, headers=["exercise", "mistake", "caught by", "message"], tablefmt="simple"))
    few = {e: n for e, n in per_exercise.items() if n < 3}
    assert not few and len(MISTAKES) >= 72, f"exercises with fewer than 3 mistakes: {few}; {len(MISTAKES)} in all"


# ----------------------------------------------------------------------------------------------------------
# Hints, and the classroom formats: Gradescope, GitHub Classroom, grades.csv


def test_hints_are_the_solutions_hints():
    """Each test file's HINTS (shown under a wrong answer) are the hints of its solution's regions."""
    for path in sorted((ROOT / "solutions").glob("ch*_*.py")):
        regions: dict[str, list[str]] = {}
        for exercise, hint in re.findall(r"# BEGIN SOLUTION (\S+): (.+)", path.read_text()):
            regions.setdefault(exercise, []).append(hint.strip())
        tree = ast.parse((ROOT / "exercises" / f"test_{path.name}").read_text())  # read, not imported
        hints = next(
            ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "HINTS"
        )
        assert hints == {e: "; ".join(h) for e, h in regions.items()}, f"exercises/test_{path.name}: HINTS"


def test_gradescope_results_agree_with_the_grade(runs):
    for name in ("solutions", "stubs"):
        _, grade = runs[name].result()
        results = json.loads((runs[name].dir / "results.json").read_text())
        tests = results["tests"]
        keys = {"name", "number", "score", "max_score", "status", "output", "visibility"}
        assert all(set(t) == keys for t in tests), tests[0]
        assert results["score"] == grade["earned"] == sum(t["score"] for t in tests), name
        assert sum(t["max_score"] for t in tests) == grade["possible"]
        assert len(tests) == sum(e["tests"] for e in grade["exercises"].values())
    assert all("not done yet" in t["output"] and t["status"] == "failed" for t in tests), "the stubs' results"


def test_github_classroom_runs_each_exercise_for_its_points(solutions_run, stubs_run):
    tests = json.loads((ROOT / ".github" / "classroom" / "autograding.json").read_text())["tests"]
    points = {e: g["possible"] for e, g in solutions_run[1]["exercises"].items()}
    assert {t["name"]: t["points"] for t in tests} == {f"Exercise {e}": p for e, p in points.items()}
    for t in tests:
        exercise = t["name"].split()[-1]
        assert t["run"] == f"python -m pytest exercises/ -q -p no:cacheprovider -k {exercise}", t
        # Exit status 0 is not enough: the grader's verdict must be in the output, so an empty or early exit fails.
        assert (t["comparison"], t["output"]) == ("included", "every selected test passed"), t
    total = solutions_run[1]["possible"]
    assert f"grade: {total:g}/{total:g} points, every selected test passed" in solutions_run[0]
    assert "every selected test passed" not in stubs_run[0]


def test_make_grade_writes_one_row_per_learner(runs, solutions_run):
    run = runs["grade submissions"]
    run.wait()
    assert run.proc.returncode == 0, run.output.read_text()[-3000:]
    with open(run.csv) as f:
        rows = {r["learner"]: r for r in csv.DictReader(f)}
    exercises = list(solutions_run[1]["exercises"])
    assert set(rows) == {"ada", "bo"} and list(rows["ada"]) == ["learner", *exercises, "total", "status", "note"]
    possible = solutions_run[1]["possible"]
    lost = solutions_run[1]["exercises"]["5.2"]["possible"] - 1  # 5.2's one test of effective_batch still passes
    assert float(rows["ada"]["5.2"]) == 1 and float(rows["ada"]["total"]) == possible - lost, rows["ada"]
    assert rows["ada"]["status"] == "graded" and rows["ada"]["note"] == "", rows["ada"]
    assert float(rows["bo"]["total"]) == 0 and rows["bo"]["status"] == "graded", "nothing handed in, nothing earned"


# ----------------------------------------------------------------------------------------------------------
# A hanging answer times out, and the other exercises still run


HANGING_SEARCH = Mistake(
    "7.1",
    "find_max_batch_size",
    "test_binary_search_finds_the_largest_batch",
    """
    def find_max_batch_size(fits, low=1, high=256):
        lo, hi = low, high
        while lo < hi:
            mid = (lo + hi) // 2  # rounds down: once hi == lo + 1 and mid fits, lo = mid forever
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo
    """,
)


def test_a_hanging_answer_times_out_once_and_the_rest_still_run(runs):
    output, grade = runs["hang"].result()
    assert set(grade["exercises"]) == {"7.1", "7.2"}, "-k selects tests by exercise id or by name"
    assert set(grade["exercises"]["7.1"]["results"].values()) == {"timeout"}, grade["exercises"]["7.1"]
    assert statuses(grade)["test_planner_rules"] == "passed", "the tests after the hanging one still run"
    # One timeout for the exercise: its first test waits 5 s, its second is not run. Counted above pytest's
    # short summary, which repeats each failure's message cut to the terminal's width (so it varies by machine).
    failures = output.split("short test summary info")[0]
    assert failures.count("timed out after 5 s") == 1 and "Traceback" not in output, output[-3000:]
    assert "Exercise 7.1: not run, an earlier test of this exercise timed out" in output


# ----------------------------------------------------------------------------------------------------------
# The exercise notebooks stop at their first check cell while the answers are stubs


@pytest.mark.parametrize("notebook", EXERCISE_NOTEBOOKS)
def test_exercise_notebook_stops_at_its_first_check_cell(notebook, runs):
    code, output = runs[notebook].result()
    n = int(notebook[2:4])
    assert code != 0, f"exercises/{notebook} ran to the end with the stubs"
    assert f"# Check {n}.1" in output, f"exercises/{notebook} failed before its first check cell:\n{output[-3000:]}"
    assert f"NotImplementedError: Exercise {n}.1: " in output and f"see chapters/{n:02d}_" in output, output[-3000:]
