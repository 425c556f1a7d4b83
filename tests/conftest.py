import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

# Every test run gets its own cache (generated corpus, token files) so no test depends on a user's ~/.cache.
# Set at import time, before any minigpt module reads it; shared by the whole session so it is built once.
OWN_CACHE = "MINIGPT_CACHE" not in os.environ
os.environ.setdefault("MINIGPT_CACHE", tempfile.mkdtemp(prefix="minigpt-test-cache-"))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session", autouse=True)
def fixed_step_time_calibration():
    """The planner's clock as a fixed calibration in the session's own cache: a test that plans through the
    command line neither spends the calibration's seconds nor plans by this machine's load of the moment
    (tests/test_step_time.py runs the real measurement once). A cache given by MINIGPT_CACHE is left alone."""
    if OWN_CACHE:
        from minigpt import calibrate
        from minigpt.step_time import Calibration

        # the rates of one calibration of a 2-core CPU, rounded
        per_precision = {"fp32": (1.5e-11, 2e-9, 1e-3), "bf16": (8e-12, 2e-9, 2e-3), "fp16": (1.8e-10, 2e-9, 1e-3)}
        fixed = Calibration(
            compute=per_precision | {"bf16-pure": (7e-12, 2e-9, 2e-3)},
            optimizer={"adamw": 2e-9, "adamw8bit": 9e-9},
            optimizer_extra={"fp16": 1e-10, "bf16-pure": 6e-10},
            recompute={"none": 0.0, "full": 1.2, "sqrt": 1.1, "selective": 1.1},
            chunked_loss=1.0,
            unpack={"int8": 1e-9, "nf4": 3.5e-9},
            offload=2.2e9,
            per_step=1e-3,
            offload_per_layer=1e-3,
            lora_saving=0.5,
            created="a fixed calibration of the tests",
        )
        calibrate.save(calibrate.cache_path("cpu"), fixed)


# ----------------------------------------------------------------------------------------------------------
# The quick benchmark run (tests/test_benchmarks.py): minutes of one process on one core, started as soon as the
# tests are collected and run beside them (while a test runs in this process, a 2-core machine's other core is
# mostly idle), its test moved last so that it waits for the run as little as possible.

QUICK_RUN = "tests/test_benchmarks.py::test_quick_run_writes_results_and_plots"


@dataclass
class QuickRun:
    """The background run: its process, and the folder that holds its log, its results and its own cache."""

    proc: subprocess.Popen
    folder: Path

    @property
    def results(self) -> Path:
        return self.folder / "results"

    @property
    def output(self) -> Path:
        return self.folder / "output.txt"


_quick_run: list[QuickRun] = []  # the session's one run, once started


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    quick = [item for item in items if item.nodeid == QUICK_RUN]
    for item in quick:
        items.remove(item)
        items.append(item)


def pytest_collection_finish(session):
    if any(item.nodeid == QUICK_RUN for item in session.items):
        start_quick_run()


def start_quick_run() -> QuickRun:
    """The background run (started once). Its own cache: the run builds its own corpus and calibration, and never
    writes where the tests' fixed calibration is."""
    if not _quick_run:
        folder = Path(tempfile.mkdtemp(prefix="minigpt-quick-benchmarks-"))
        # One torch thread: the run only checks the code paths, and a second thread per process makes every
        # small op wait on a busy 2-core machine.
        root = Path(__file__).resolve().parents[1]
        env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
        env["MINIGPT_CACHE"] = str(folder / "cache")
        command = [sys.executable, "-m", "benchmarks.run_all", "--quick", "--out", str(folder / "results")]
        with open(folder / "output.txt", "w") as log:  # the child keeps its own copy of the file
            proc = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        _quick_run.append(QuickRun(proc, folder))
    return _quick_run[0]


def pytest_sessionfinish(session, exitstatus):
    for run in _quick_run:
        if run.proc.poll() is None:  # the session stopped early (-x, Ctrl-C): do not leave it running
            run.proc.kill()
            run.proc.wait()
        shutil.rmtree(run.folder, ignore_errors=True)


@pytest.fixture
def quick_benchmark_run() -> QuickRun:
    """The quick run started after collection (or now, where the hook did not start it): waits for it to end."""
    run = start_quick_run()
    run.proc.wait(timeout=1800)  # a guard against hangs only: the run takes a few minutes
    return run


@pytest.fixture
def tiny_cfg():
    """A model small enough to train in a second, with a small vocabulary."""
    from minigpt.model import ModelConfig

    return ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64)


def markov_tokens(n: int, vocab: int = 256, seed: int = 0) -> np.ndarray:
    """A learnable token stream: each token has 4 likely successors (a sparse Markov chain)."""

    rng = np.random.default_rng(seed)
    successors = rng.integers(0, vocab, size=(vocab, 4))
    out = np.empty(n, dtype=np.uint16)
    out[0] = 0
    choices = rng.integers(0, 4, size=n)
    for i in range(1, n):
        out[i] = successors[out[i - 1], choices[i]]
    return out


@pytest.fixture(scope="session")
def markov_data():
    """TokenData over a synthetic Markov stream: loop tests run without building the corpus."""
    from minigpt.data import TokenData

    tokens = markov_tokens(60_000)
    return TokenData(train=tokens[:50_000], val=tokens[50_000:], tokenizer="minigpt-8k", source="markov")


# ----------------------------------------------------------------------------------------------------------
# Grader runs shared by tests/test_grading.py and tests/test_grading_contracts.py: one queue for the session


@pytest.fixture(scope="session")
def grader_limiter():
    """The queue every grader subprocess of the session goes through (a few at a time on a small machine)."""
    from grading_runs import Limiter

    limiter = Limiter()
    yield limiter
    limiter.stop()


LIVE_ROUNDS = 2  # wrong-answer rounds graded a second time with the reference run live


@pytest.fixture(scope="session")
def wrong_answer_runs(grader_limiter, tmp_path_factory):
    """Every wrong-answer set (tests/wrong_answers/) graded in rounds with the stored outcomes (exercises/expected/:
    what `pytest exercises/` reads by default and the classroom template always), and the first LIVE_ROUNDS rounds
    a second time with the reference run live from solutions/.

    The live runs cost as much again as the rest of the grading tests; they can only differ from the stored ones
    where a stored outcome differs from the reference's, which test_the_stored_outcomes_are_the_references checks
    case by case. The first rounds hold one wrong answer of every function that has one, so every exercise is
    still graded both ways (test_the_template_way_and_the_instructors_way_give_the_same_grade).

    {set name: {mistake name: {"stored": GraderRun[, "live": GraderRun]}}}; a run's result() waits for it.
    """
    from grading_runs import GraderRun, answers_with, rounds
    from wrong_answers import SETS

    # One set of rounds for every set together: a round holds at most one wrong answer per function, so the
    # rounds number the most wrong answers any one function has, whatever the number of sets.
    every = {(set_name, name): m for set_name, mistakes in SETS.items() for name, m in mistakes.items()}
    labels = {f"{set_name}: {name}": key for key, (set_name, name) in zip(every, every)}
    queued: dict[str, dict] = {set_name: {} for set_name in SETS}
    for i, group in enumerate(rounds({label: every[key] for label, key in labels.items()})):
        tmp = tmp_path_factory.mktemp(f"wrong-{i}")
        folder = answers_with(tmp / "answers", group)
        exercises = " or ".join(sorted({m.exercise for m in group.values()}))
        files = tuple(sorted({f"exercises/test_{m.module}.py" for m in group.values()}))
        runs = {}
        for mode in ("stored", "live") if i < LIVE_ROUNDS else ("stored",):
            args = (
                "--answers-dir",
                str(folder),
                "-k",
                exercises,
                "--expected",
                "reference" if mode == "live" else mode,
            )
            runs[mode] = GraderRun(grader_limiter, tmp / mode, *args, files=files)
        for label in group:
            set_name, name = labels[label]
            queued[set_name][name] = runs
    return queued
