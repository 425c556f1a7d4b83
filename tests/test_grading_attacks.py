"""Answers that attack the grader, or break it by accident: each attack sits in chapter 1's answer file, beside
correct answers. Whatever the attack, grading finishes in bounded time, the attacked exercise scores 0, the
honest exercises beside it score in full, and the exit status follows the grade.

Each grading is a subprocess, as a learner or a classroom runs it: `python -m pytest exercises/ ...`, or
`scripts/grade_submissions.py` (make grade) for the attacks on grade files.
"""

import ast
import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 300  # "finishes in bounded time": minutes at most on a busy 2-core machine, where a hang is forever
pytestmark = pytest.mark.timeout(3600)

STUB_1_1 = """
def decode_float(value, dtype):
    raise NotImplementedError("Exercise 1.1: not done")
"""
FIND_GRADE_JSON = """
import atexit, json, os, sys


def grade_json_paths():
    # --grade-json PATH in this process's command line, or in any parent's (read from /proc)
    lines, pid = [sys.argv], os.getpid()
    while pid > 1:
        try:
            lines.append(open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\\0"))
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return {line[i + 1] for line in lines for i, arg in enumerate(line[:-1]) if arg == "--grade-json"}


def write_fake_grade():
    for path in grade_json_paths():
        with open(path, "w") as f:
            json.dump(FAKE, f)


write_fake_grade()
atexit.register(write_fake_grade)
"""
ATTACKS = {
    # Buggy answers that used to stop grading
    "a retry loop with a bare except": """
        def decode_float(value, dtype):
            while True:  # retry until it works
                try:
                    raise NotImplementedError("Exercise 1.1: not done")
                except:  # noqa: E722 - swallows everything, a timeout too
                    pass
        """,
    "an answer that ignores SIGALRM": """
        import signal


        def decode_float(value, dtype):
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            while True:
                pass
        """,
    "a non-daemon thread left running": """
        import threading


        def decode_float(value, dtype):
            threading.Thread(target=lambda: [None for _ in iter(int, 1)]).start()  # spins forever
            raise NotImplementedError("Exercise 1.1: not done")
        """,
    "a file that hangs at import": "\nwhile True:\n    pass\n",
    "an answer that stops its parent (the server workers fork from)": """
        def decode_float(value, dtype):
            import os
            import signal

            os.kill(os.getppid(), signal.SIGSTOP)  # the next exercise's worker is never forked, unless woken
            raise NotImplementedError("Exercise 1.1: not done")
        """,
    "an answer that stops the grader itself": STUB_1_1
    + textwrap.dedent(
        """
        import os
        import signal


        def decode_float(value, dtype):
            server = os.getppid()  # the server the workers fork from; its parent is the grader
            grader = int(open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()[1])
            os.kill(grader, signal.SIGSTOP)
            raise NotImplementedError("Exercise 1.1: not done")
        """
    ),
    # Dishonest answers that used to raise the score
    "a re-registered reporting hook and a replaced grade": STUB_1_1
    + textwrap.dedent(
        """
        import gc

        import pytest

        import minigpt.grading.plugin
        import minigpt.grading.score


        def full_marks(results):
            return {"earned": 9.0, "possible": 9.0, "exercises": {}}


        minigpt.grading.score.grade = minigpt.grading.plugin.grade = full_marks


        class AllPassed:
            @pytest.hookimpl(hookwrapper=True)
            def pytest_runtest_makereport(self, item, call):
                outcome = yield
                outcome.get_result().outcome = "passed"


        for thing in gc.get_objects():
            if isinstance(thing, pytest.Config):
                thing.pluginmanager.register(AllPassed())
        """
    ),
    "os._exit(0) in the answer": """
        def decode_float(value, dtype):
            import os

            print("every selected test passed")  # what GitHub Classroom looks for
            os._exit(0)
        """,
    "os._exit(0) at import": "\nimport os\n\nos._exit(0)\n",
    "an atexit hook that writes its own grade.json": STUB_1_1
    + "\nFAKE = {'earned': 999, 'possible': 9, 'exercises': {'1.1': {'earned': 999, 'possible': 2}}}\n"
    + FIND_GRADE_JSON,
    "a grade.json with an extra exercise": STUB_1_1
    + "\nFAKE = {'earned': 100, 'possible': 9, 'exercises': {'9.9': {'earned': 100, 'possible': 100}}}\n"
    + FIND_GRADE_JSON,
}
HANGS = {"a retry loop with a bare except", "an answer that ignores SIGALRM", "a file that hangs at import"}
AT_IMPORT = {"a file that hangs at import", "os._exit(0) at import"}  # top-level code: the chapter-1 file is lost
# through make grade (one grader process per learner, run by scripts/grade_submissions.py, which keeps it awake)
ON_GRADE_FILES = {
    "an atexit hook that writes its own grade.json",
    "a grade.json with an extra exercise",
    "an answer that stops the grader itself",
}


def points(test_file: str) -> dict[str, float]:
    """{exercise: its points} from the @pytest.mark.exercise markers of an exercises/ test file (read, not run)."""
    found: dict[str, float] = {}
    for node in ast.walk(ast.parse((ROOT / "exercises" / test_file).read_text())):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.exercise":
            weight = next((k.value.value for k in node.keywords if k.arg == "points"), 1)
            found[node.args[0].value] = found.get(node.args[0].value, 0) + weight
    return found


CHAPTER_1 = points("test_ch01_number_formats.py")
CHAPTER_2 = points("test_ch02_memory_anatomy.py")


def answers(folder: Path, attack: str | None) -> Path:
    """chapters 1 and 2 of solutions/ (without the solution markers), with the attack appended to chapter 1."""
    folder.mkdir(parents=True)
    for name in ("ch01_number_formats.py", "ch02_memory_anatomy.py"):
        text = re.sub(r"^\s*# (BEGIN|END) SOLUTION.*\n", "", (ROOT / "solutions" / name).read_text(), flags=re.M)
        if attack is not None and name.startswith("ch01"):
            text += "\n\n" + textwrap.dedent(ATTACKS[attack])  # a def appended wins over the first
        (folder / name).write_text(text)
    return folder


def run(cmd: list[str], output: Path) -> tuple[int, float]:
    """(exit status, seconds) of cmd; killed with its process group at BOUND_S (returning status None)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    with open(output, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True)
        try:
            code = proc.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return code, time.monotonic() - start


def grade_attack(attack: str, tmp: Path) -> dict:
    """Grade chapters 1 and 2 with the attack in chapter 1: {"code", "seconds", "output", "grade", ...}."""
    tmp.mkdir(parents=True)
    if attack in ON_GRADE_FILES:  # through make grade: one attacker and one honest learner
        answers(tmp / "submissions" / "mallory" / "exercises", attack)
        answers(tmp / "submissions" / "ada" / "exercises", None)
        cmd = [sys.executable, "scripts/grade_submissions.py", str(tmp / "submissions"), "--out", str(tmp / "g.csv")]
        code, seconds = run(cmd, tmp / "output.txt")
        with open(tmp / "g.csv") as f:
            rows = {r["learner"]: r for r in csv.DictReader(f)}
        return {"code": code, "seconds": seconds, "output": (tmp / "output.txt").read_text(), "rows": rows}
    folder = answers(tmp / "answers", attack)
    cmd = [sys.executable, "-m", "pytest", "exercises/", "-q", "-p", "no:cacheprovider", "-k", "1. or 2."]
    cmd += ["--answers-dir", str(folder), "--grade-json", str(tmp / "grade.json")]
    cmd += ["--gradescope", str(tmp / "results.json"), "--exercise-timeout", "5"]
    code, seconds = run(cmd, tmp / "output.txt")
    grade = json.loads((tmp / "grade.json").read_text()) if (tmp / "grade.json").exists() else None
    results = json.loads((tmp / "results.json").read_text()) if (tmp / "results.json").exists() else None
    output = (tmp / "output.txt").read_text()
    return {"code": code, "seconds": seconds, "output": output, "grade": grade, "gradescope": results}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, dict]:
    """Every attack graded, three at a time."""
    tmp = tmp_path_factory.mktemp("attacks")
    with ThreadPoolExecutor(3) as pool:
        futures = {a: pool.submit(grade_attack, a, tmp / f"attack{i}") for i, a in enumerate(ATTACKS)}
        return {a: f.result() for a, f in futures.items()}


def earned(grade: dict) -> dict[str, float]:
    return {e: g["earned"] for e, g in grade["exercises"].items()}


@pytest.mark.parametrize("attack", sorted(set(ATTACKS) - ON_GRADE_FILES))
def test_an_attack_costs_only_its_own_exercise(attack, graded):
    r = graded[attack]
    assert r["code"] is not None, f"grading did not finish in {BOUND_S} s:\n{r['output'][-3000:]}"
    assert r["grade"] is not None, f"no grade.json (exit status {r['code']}):\n{r['output'][-3000:]}"
    attacked = set(CHAPTER_1) if attack in AT_IMPORT else {"1.1"}
    honest = {**CHAPTER_1, **CHAPTER_2}
    want = {e: 0.0 if e in attacked else float(p) for e, p in honest.items()}
    assert earned(r["grade"]) == want, f"{attack}: {earned(r['grade'])}\n{r['output'][-3000:]}"
    assert r["grade"]["earned"] == sum(want.values()) and r["gradescope"]["score"] == r["grade"]["earned"]
    assert r["code"] == 1, f"{attack}: exit status {r['code']}, but not every test passed"
    assert "every selected test passed" not in r["output"].split("score:")[-1], "the verdict line lies"
    if attack in HANGS:  # one timeout, not one per exercise of the chapter
        assert "timed out after 5 s" in r["output"] and r["seconds"] < BOUND_S


def test_a_hang_at_import_costs_one_timeout_for_its_chapter(graded):
    grade = graded["a file that hangs at import"]["grade"]
    statuses = {e: set(g["results"].values()) for e, g in grade["exercises"].items()}
    assert statuses["1.1"] == {"timeout"} and all(statuses[e] == {"error"} for e in ("1.2", "1.3", "1.4"))
    messages = [m for e in ("1.2", "1.3", "1.4") for m in grade["exercises"][e]["messages"].values()]
    assert all("not run: importing ch01_number_formats.py timed out" in m for m in messages), messages


def test_an_exit_in_the_answer_is_a_failure_with_its_reason(graded):
    grade = graded["os._exit(0) in the answer"]["grade"]
    (message,) = grade["exercises"]["1.1"]["messages"].values()
    assert "ended its process (exit status 0)" in message and "Hint:" in message, message


@pytest.mark.parametrize("attack", sorted(ON_GRADE_FILES))
def test_an_attack_on_grade_files_changes_no_grade(attack, graded):
    r = graded[attack]
    assert r["code"] == 0, f"make grade failed (exit status {r['code']}):\n{r['output'][-3000:]}"
    rows = r["rows"]
    assert set(rows) == {"mallory", "ada"}, "one row per learner"
    for learner, attacked in (("mallory", {"1.1"}), ("ada", set())):
        row = rows[learner]
        want = {e: 0.0 if e in attacked else float(p) for e, p in {**CHAPTER_1, **CHAPTER_2}.items()}
        assert {e: float(row[e]) for e in want} == want, f"{learner}: {row}"
        assert float(row["total"]) == sum(want.values()) and row["status"] == "graded", row
