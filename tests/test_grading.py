"""The grading machinery: exercises/ is generated from solutions/, the reference answers pass every test,
the untouched stubs fail every test with their hint, the classic wrong answers fail, a hanging answer
times out while the rest still run, and the exercise notebooks stop at their first check cell.

The grader runs in a subprocess (`python -m pytest exercises/ ...`), as a learner or a classroom runs it.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANSI_COLOR = re.compile(r"\x1b\[[0-9;]*m")  # the colors of IPython's tracebacks
# The runs below are whole pytest sessions and notebook executions, started together: minutes on a busy CPU.
pytestmark = pytest.mark.timeout(900)


def _load_script():
    spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "scripts" / "make_exercises.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_exercises = _load_script()


class GraderRun:
    """`python -m pytest exercises/ ...` started in a subprocess; result() waits: (its output, its grade.json).

    The runs of this file are independent, so they are all started at once and run side by side.
    """

    def __init__(self, tmp: Path, *args: str, files: tuple[str, ...] = ("exercises/",)) -> None:
        self.grade, self.output = tmp / "grade.json", tmp / "output.txt"
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
        with open(self.output, "w") as out:  # a file, not a pipe: nothing blocks while it is not read
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        self._result = None

    def result(self) -> tuple[str, dict]:
        if self._result is None:
            self.proc.wait(timeout=900)
            output = self.output.read_text()
            assert self.grade.exists(), f"the grader wrote no grade.json:\n{output[-4000:]}"
            self._result = output, json.loads(self.grade.read_text())
        return self._result


def statuses(grade: dict) -> dict[str, str]:
    """test name -> status, over every exercise."""
    return {node.split("::")[-1]: s for e in grade["exercises"].values() for node, s in e["results"].items()}


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


class NotebookRun:
    """`jupyter nbconvert --execute` of an exercise notebook, started now; result() waits: (exit code, output)."""

    def __init__(self, notebook: Path, out_dir: Path) -> None:
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
            str(notebook),
        ]
        self.output = out_dir / "output.txt"
        with open(self.output, "w") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)

    def result(self) -> tuple[int, str]:
        self.proc.wait(timeout=900)
        return self.proc.returncode, ANSI_COLOR.sub("", self.output.read_text())


EXERCISE_NOTEBOOKS = sorted(p.name for p in (ROOT / "solutions").glob("ch*.ipynb"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every grader run this file checks, started together: the solutions, the stubs, the wrong variants, a hang."""
    started = {
        "solutions": GraderRun(tmp_path_factory.mktemp("solutions"), "--solutions"),
        "stubs": GraderRun(tmp_path_factory.mktemp("stubs")),
    }
    for i, variants in enumerate(_rounds()):
        tmp = tmp_path_factory.mktemp(f"wrong{i}")
        folder = answers_with(tmp / "answers", variants)
        exercises = sorted({v[1] for v in variants.values()})
        files = tuple(sorted({f"exercises/test_{v[0]}.py" for v in variants.values()}))
        run = GraderRun(tmp, "--answers-dir", str(folder), "-k", " or ".join(exercises), files=files)
        started.update({name: run for name in variants})
    tmp = tmp_path_factory.mktemp("hang")
    folder = answers_with(tmp / "answers", {"hang": ("ch07_fitting_it_together", "7.1", "", HANGING_SEARCH)})
    started["hang"] = GraderRun(
        tmp,
        "--answers-dir",
        str(folder),
        "--exercise-timeout",
        "5",
        "-k",
        "7.1 or test_planner_rules",
        files=("exercises/test_ch07_fitting_it_together.py",),
    )
    for name in EXERCISE_NOTEBOOKS:
        started[name] = NotebookRun(ROOT / "exercises" / name, tmp_path_factory.mktemp("notebooks"))
    yield started
    for run in started.values():
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


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


def test_the_score_table_and_grade_json(stubs_run, solutions_run):
    output, grade = solutions_run
    assert "exercise    points    tests passed    status" in output
    assert "total" in output
    exercise = grade["exercises"]["4.1"]
    assert set(exercise) == {"earned", "possible", "tests_passed", "tests", "passed", "results"}
    assert exercise["passed"] is True and exercise["earned"] == exercise["possible"]
    assert sum(e["possible"] for e in grade["exercises"].values()) == grade["possible"]
    assert stubs_run[1]["possible"] == grade["possible"], "the stubs and the solutions are graded by the same tests"


# ----------------------------------------------------------------------------------------------------------
# The classic wrong answers (seed 001, section 7, and a few more) fail the exercise they belong to

WRONG = {
    # name: (chapter module, exercise, test expected to fail, the wrong function)
    "no division by accum": (
        "ch05_grad_accumulation",
        "5.1",
        "test_equal_micro_batches_match_one_big_batch",
        """
        def accumulate_gradients(model, micro_batches):
            total = 0.0
            for x, y in micro_batches:
                _, loss = model(x, y)
                loss.backward()  # forgot to divide: the gradients are accum times too big
                total += loss.item()
            return total / len(micro_batches)
    """,
    ),
    "mean of micro-batch means with padding": (
        "ch05_grad_accumulation",
        "5.1",
        "test_padded_micro_batches_are_normalized_by_tokens",
        """
        def accumulate_gradients(model, micro_batches):
            total = 0.0
            for x, y in micro_batches:
                _, loss = model(x, y)  # the mean over THIS micro-batch's targets
                (loss / len(micro_batches)).backward()  # right without padding, wrong with it
                total += loss.item() / len(micro_batches)
            return total
    """,
    ),
    "clipping before unscale": (
        "ch04_fp16_gradscaler",
        "4.1",
        "test_clips_the_unscaled_gradients",
        """
        def scaled_fp16_step(model, optimizer, scaler, x, y, max_norm=1.0):
            with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                _, loss = model(x, y)
            scale = scaler.get_scale()
            scaler.scale(loss).backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # clips SCALED grads
            scaler.step(optimizer)  # unscales only now
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            return {"loss": loss.item(), "grad_norm": grad_norm.item(), "scale": scale,
                    "skipped": scaler.get_scale() < scale}
    """,
    ),
    "fp16 without a scaler": (
        "ch04_fp16_gradscaler",
        "4.1",
        "test_small_gradients_survive_fp16",
        """
        def scaled_fp16_step(model, optimizer, scaler, x, y, max_norm=1.0):
            with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                _, loss = model(x, y)
            loss.backward()  # no loss scaling: small fp16 gradients flush to zero
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return {"loss": loss.item(), "grad_norm": grad_norm.item(), "scale": 1.0, "skipped": False}
    """,
    ),
    "scheduler steps on skipped steps": (
        "ch04_fp16_gradscaler",
        "4.3",
        "test_schedule_does_not_move_on_a_skipped_step",
        """
        def step_unless_skipped(optimizer, scheduler, scaler):
            scale = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()  # even when the scaler skipped the step
            return scaler.get_scale() < scale
    """,
    ),
    "scale tracker not reset after an overflow": (
        "ch04_fp16_gradscaler",
        "4.2",
        "test_update_scale_matches_gradscaler",
        """
        def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5,
                         growth_interval=2000):
            if found_inf:
                return scale * backoff_factor, growth_tracker  # the clean streak should restart at 0
            growth_tracker += 1
            if growth_tracker == growth_interval:
                return scale * growth_factor, 0
            return scale, growth_tracker
    """,
    ),
    "loss computed in bf16": (
        "ch03_autocast",
        "3.1",
        "test_forward_in_16_bits_loss_in_fp32",
        """
        def autocast_train_step(model, optimizer, x, y, dtype=torch.bfloat16, max_norm=1.0):
            with torch.autocast(device_type=x.device.type, dtype=dtype):
                logits, _ = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))  # 16-bit logits, 16-bit loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()
    """,
    ),
    "recompute with other dropout masks": (
        "ch06_checkpointing",
        "6.1",
        "test_dropout_masks_are_the_same_when_recomputed",
        """
        def checkpointed_forward(blocks, x, cos, sin):
            for block in blocks:
                x = checkpoint(block, x, cos, sin, use_reentrant=False, preserve_rng_state=False)
            return x
    """,
    ),
    "every error read as out of memory": (
        "ch07_fitting_it_together",
        "7.3",
        "test_other_errors_are_not_swallowed",
        """
        def step_fits(run_step):
            try:
                run_step()
            except Exception:  # a shape bug now reads as "does not fit"
                return False
            return True
    """,
    ),
    "binary search off by one": (
        "ch07_fitting_it_together",
        "7.1",
        "test_binary_search_finds_the_largest_batch",
        """
        def find_max_batch_size(fits, low=1, high=256):
            lo, hi = low, high
            while lo < hi:  # finds the first batch that does NOT fit
                mid = (lo + hi) // 2
                if fits(mid):
                    lo = mid + 1
                else:
                    hi = mid
            return lo
    """,
    ),
}


def _rounds() -> list[dict[str, tuple]]:
    """Group the wrong variants into as few grader runs as possible: one variant per function per run."""
    rounds: list[dict[str, tuple]] = []
    for name, variant in WRONG.items():
        key = (variant[0], variant[3].split("def ")[1].split("(")[0])
        for r in rounds:
            if key not in {(v[0], v[3].split("def ")[1].split("(")[0]) for v in r.values()}:
                r[name] = variant
                break
        else:
            rounds.append({name: variant})
    return rounds


def answers_with(folder: Path, variants: dict[str, tuple]) -> Path:
    """A copy of solutions/*.py in which each variant's function is redefined (the later def wins)."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "solutions").glob("ch*_*.py"):
        shutil.copy(path, folder / path.name)
    for name, (module, _, _, source) in variants.items():
        path = folder / f"{module}.py"
        path.write_text(path.read_text() + f"\n\n# WRONG: {name}\n" + textwrap.dedent(source))
    return folder


@pytest.fixture(scope="module")
def wrong_runs(runs) -> dict[str, dict]:
    """grade.json of the grader run that holds each wrong variant, by variant name."""
    return {name: runs[name].result()[1] for name in WRONG}


@pytest.mark.parametrize("mistake", WRONG)
def test_the_grader_catches(mistake, wrong_runs):
    _, exercise, test_name, _ = WRONG[mistake]
    result = wrong_runs[mistake]["exercises"][exercise]
    assert statuses(wrong_runs[mistake])[test_name] == "failed", f"{mistake}: {result}"
    assert result["earned"] < result["possible"] and not result["passed"]


def test_padding_is_what_separates_the_mean_of_means(wrong_runs):
    """Strict, and fair: the mean of micro-batch means is right without padding, so that test passes."""
    grade = statuses(wrong_runs["mean of micro-batch means with padding"])
    assert grade["test_equal_micro_batches_match_one_big_batch"] == "passed"


# ----------------------------------------------------------------------------------------------------------
# A hanging answer times out, and the other exercises still run


HANGING_SEARCH = """
    def find_max_batch_size(fits, low=1, high=256):
        lo, hi = low, high
        while lo < hi:
            mid = (lo + hi) // 2  # rounds down: once hi == lo + 1 and mid fits, lo = mid forever
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo
"""


def test_a_hanging_answer_times_out_and_the_rest_still_run(runs):
    output, grade = runs["hang"].result()
    assert set(grade["exercises"]) == {"7.1", "7.2"}, "-k selects tests by exercise id or by name"
    assert "timeout" in grade["exercises"]["7.1"]["results"].values()
    assert statuses(grade)["test_planner_rules"] == "passed", "the tests after the hanging one still run"
    assert "Exercise 7.1 timed out after 5 s" in output and "Traceback" not in output


# ----------------------------------------------------------------------------------------------------------
# The exercise notebooks stop at their first check cell while the answers are stubs


@pytest.mark.parametrize("notebook", EXERCISE_NOTEBOOKS)
def test_exercise_notebook_stops_at_its_first_check_cell(notebook, runs):
    code, output = runs[notebook].result()
    n = int(notebook[2:4])
    assert code != 0, f"exercises/{notebook} ran to the end with the stubs"
    assert f"# Check {n}.1" in output, f"exercises/{notebook} failed before its first check cell:\n{output[-3000:]}"
    assert f"NotImplementedError: Exercise {n}.1: " in output and f"see chapters/{n:02d}_" in output, output[-3000:]
