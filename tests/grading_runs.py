"""What the grading tests share: grader runs in subprocesses, a few at a time (Limiter, GraderRun), and wrong
answers written into a copy of solutions/ (Mistake, answers_with, rounds). The wrong-answer sets themselves are
in tests/wrong_answers/."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANSI_COLOR = re.compile(r"\x1b\[[0-9;]*m")  # the colors of IPython's tracebacks


class Limiter:
    """Runs subprocesses side by side, a few more at once than the machine has cores, not all of them.

    Started all at once (seven notebook kernels and a dozen grader runs on two cores), a kernel could miss
    its 60 s startup handshake and a notebook fail before its first cell: flaky under load. At most this
    many run at a time (twice the cores and two: a starting kernel mostly waits); each run's result()
    keeps the queue moving while it waits.
    """

    def __init__(self, limit: int = 2 * (os.cpu_count() or 2) + 2) -> None:
        self.limit, self.pending, self.running = limit, [], []

    def add(self, run: "Run") -> None:
        self.pending.append(run)
        self._start()

    def _start(self) -> None:
        self.running = [r for r in self.running if r.proc.poll() is None]
        while self.pending and len(self.running) < self.limit:
            run = self.pending.pop(0)
            run.start()
            self.running.append(run)

    def wait(self, run: "Run", timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while run.proc is None or run.proc.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{run.cmd} did not finish in {timeout:g} s")
            self._start()
            time.sleep(0.05)
        self._start()

    def stop(self) -> None:
        self.pending.clear()
        for run in self.running:
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()


class Run:
    """A subprocess whose output goes to a file (nothing blocks while it is not read), started by a Limiter."""

    def __init__(self, cmd: list[str], env: dict, output: Path, limiter: Limiter) -> None:
        self.cmd, self.env, self.output, self.limiter, self.proc = cmd, env, output, limiter, None
        limiter.add(self)

    def start(self) -> None:
        with open(self.output, "w") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def wait(self) -> None:
        self.limiter.wait(self)


class GraderRun(Run):
    """`python -m pytest exercises/ ...` in a subprocess; result() waits: (its output, its grade.json)."""

    def __init__(self, limiter: Limiter, tmp: Path, *args: str, files: tuple[str, ...] = ("exercises/",)) -> None:
        self.dir, self.grade, self.output = tmp, tmp / "grade.json", tmp / "output.txt"
        tmp.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1",
        }  # one thread each: several run at once
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            *files,
            "-q",
            "-p",
            "no:cacheprovider",
            "--grade-json",
            str(self.grade),
            *args,
        ]
        self._result = None
        super().__init__(cmd, env, self.output, limiter)

    def result(self) -> tuple[str, dict]:
        if self._result is None:
            self.wait()
            output = self.output.read_text()
            assert self.grade.exists(), f"the grader wrote no grade.json:\n{output[-4000:]}"
            self._result = output, json.loads(self.grade.read_text())
        return self._result


def statuses(grade: dict) -> dict[str, str]:
    """test name -> status, over every exercise."""
    return {node.split("::")[-1]: s for e in grade["exercises"].values() for node, s in e["results"].items()}


# ----------------------------------------------------------------------------------------------------------
# One source of truth


CHAPTER_OF = {p.name[2:4].lstrip("0"): p.stem for p in (ROOT / "solutions").glob("ch*_*.py")}


@dataclass(frozen=True)
class Mistake:
    """A realistic wrong answer: `change` edits the reference answer (old text -> new text, a list of those, or a
    new def appended, which wins over the first); `test` is the test that must catch it ("": any test of the
    exercise, as in the contract-era sets of tests/wrong_answers/chNN.py)."""

    exercise: str
    function: str
    test: str
    change: tuple[str, str] | list[tuple[str, str]] | str

    @property
    def module(self) -> str:
        return CHAPTER_OF[self.exercise.split(".")[0]]


def rounds(mistakes: dict[str, "Mistake"]) -> list[dict[str, "Mistake"]]:
    """Group the mistakes into as few grader runs as possible: at most one mistake per function per run."""
    rounds: list[dict[str, Mistake]] = []
    for name, mistake in mistakes.items():
        key = (mistake.module, mistake.function)
        for r in rounds:
            if key not in {(m.module, m.function) for m in r.values()}:
                r[name] = mistake
                break
        else:
            rounds.append({name: mistake})
    return rounds


def answers_with(folder: Path, mistakes: dict[str, Mistake]) -> Path:
    """A copy of solutions/*.py (without the solution markers) with each mistake written into it."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "solutions").glob("ch*_*.py"):
        text = re.sub(r"^\s*# (BEGIN|END) SOLUTION.*\n", "", path.read_text(), flags=re.M)
        (folder / path.name).write_text(text)
    for name, m in mistakes.items():
        path = folder / f"{m.module}.py"
        text = path.read_text()
        if isinstance(m.change, str):  # a new def, appended: it replaces the first
            text += f"\n\n# WRONG: {name}\n" + textwrap.dedent(m.change)
        else:
            for old, new in m.change if isinstance(m.change, list) else [m.change]:
                assert text.count(old) == 1, f"{name}: {old!r} occurs {text.count(old)} times in {m.module}.py"
                text = text.replace(old, new)
        path.write_text(text)
    return folder


def main(argv: list[str]) -> int:
    """python tests/grading_runs.py SET ...: grade wrong-answer sets (tests/wrong_answers/SET.py) both ways, the
    reference run live and its stored outcomes, and print what each scored (a quick look while writing a set)."""
    import tempfile

    from tabulate import tabulate

    sys.path.insert(0, str(Path(__file__).parent))
    from wrong_answers import SETS

    limiter, rows, tmp = Limiter(), [], Path(tempfile.mkdtemp(prefix="wrong-answers-"))
    for set_name in argv or list(SETS):
        mistakes = SETS[set_name]
        for i, group in enumerate(rounds(mistakes)):
            folder = answers_with(tmp / set_name / str(i) / "answers", group)
            exercises = " or ".join(sorted({m.exercise for m in group.values()}))
            files = tuple(sorted({f"exercises/test_{m.module}.py" for m in group.values()}))
            runs = {
                mode: GraderRun(
                    limiter,
                    tmp / set_name / str(i) / mode,
                    "--answers-dir",
                    str(folder),
                    "-k",
                    exercises,
                    "--expected",
                    mode,
                    files=files,
                )
                for mode in ("reference", "stored")
            }
            for name, m in group.items():
                rows.append((set_name, name, m, runs))
    table, missed, differ = [], 0, 0
    for set_name, name, m, runs in rows:
        got = {mode: run.result()[1]["exercises"].get(m.exercise) for mode, run in runs.items()}
        live, stored = got["reference"], got["stored"]
        caught = live is not None and live["earned"] < live["possible"]
        agree = live is not None and stored is not None and live["results"] == stored["results"]
        missed += not caught
        differ += not agree
        first = next((msg for msg in (live or {}).get("messages", {}).values() if msg), "")
        table.append(
            [
                set_name,
                m.exercise,
                name[:48],
                "caught" if caught else "PASSED",
                "same" if agree else "DIFFER",
                first.split("\n")[0][:90],
            ]
        )
    limiter.stop()
    print(tabulate(table, headers=["set", "exercise", "wrong answer", "grade", "both ways", "first message"]))
    print(f"{len(rows) - missed} of {len(rows)} caught; {differ} graded differently by the two ways")
    return 1 if missed or differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
