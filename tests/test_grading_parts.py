"""The grader's parts, in this process: what a worker's report may hold (data, never code), how a call's changes
to its arguments come back, the score's rules, and grade files read back by `make grade` whatever they hold."""

import collections
import csv
import importlib.util
import io
import json
import math
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt.grading import transfer
from minigpt.grading.score import GradeFileError, exercise_table, grade, read_grade

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------------------
# Reports: plain data in, plain data out, and nothing that runs code


class Planted:
    """An object whose unpickling would run code: it creates a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_a_report_that_would_run_code_is_refused_without_running_it(tmp_path):
    buffer = io.BytesIO()
    torch.save({"id": 1, "result": Planted(tmp_path / "ran")}, buffer)
    with pytest.raises(ValueError, match="unreadable"):
        transfer.load_report(buffer.getvalue())
    assert not (tmp_path / "ran").exists()
    with pytest.raises(ValueError):
        transfer.load_report(b"not a report at all")


def test_results_travel_as_plain_data():
    Pair = collections.namedtuple("Pair", "a b")

    class AlwaysEqual(float):
        def __eq__(self, other):
            return True

        __hash__ = float.__hash__

    result = {
        "pair": Pair(1, "x"),
        "sneaky": AlwaysEqual(0.5),
        "numpy": np.float64(2.5),
        "tensor": torch.ones(2, requires_grad=True) * 3,
        "segments": [range(0, 3)],
        "dtype": torch.bfloat16,
        "object": object(),
    }
    back = transfer.load_report(transfer.dump_report({"result": transfer.plain(result)}))["result"]
    assert back["pair"] == (1, "x") and type(back["pair"]) is tuple
    assert type(back["sneaky"]) is float and back["sneaky"] != 0.7, "a learner's class never reaches the grader"
    assert type(back["numpy"]) is float and back["numpy"] == 2.5
    assert torch.equal(back["tensor"], torch.full((2,), 3.0)) and back["tensor"].requires_grad
    assert back["segments"] == [range(0, 3)] and back["dtype"] is torch.bfloat16
    assert isinstance(back["object"], transfer.Unreadable) and back["object"] != back["object"]


def test_what_a_call_changes_in_its_arguments_comes_back():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    weights = torch.zeros(4)
    args = (model, optimizer, scaler, {"w": weights})
    tensors, stateful = transfer.parts(args)
    assert len(tensors) == 3 and len(stateful) == 3, "weight, bias, w; model, optimizer, scaler"

    # What a worker does: its own copy (a pickle), changed by the call, then the state of that copy sent back.
    theirs = pickle.loads(pickle.dumps(args))
    their_tensors, their_stateful = transfer.parts(theirs)
    transfer.unpickled(their_tensors, their_stateful, transfer.grads_of(tensors))
    their_model, their_optimizer, their_scaler, their_dict = theirs
    their_model(torch.ones(1, 3)).sum().backward()
    their_optimizer.step()
    their_model.eval()
    their_dict["w"].add_(1.0)
    their_scaler.update(2.0)
    report = transfer.load_report(transfer.dump_report(transfer.state_after(their_tensors, their_stateful)))

    transfer.restore(tensors, stateful, report)
    assert torch.equal(model.weight, their_model.weight) and torch.equal(model.weight.grad, their_model.weight.grad)
    assert torch.equal(weights, torch.ones(4)), "a tensor changed in place is changed in the caller's copy"
    assert not model.training and scaler.get_scale() == 2.0
    momentum = their_optimizer.state[their_model.weight]["momentum_buffer"]
    assert torch.equal(optimizer.state_dict()["state"][0]["momentum_buffer"], momentum)
    with pytest.raises(ValueError):
        transfer.restore(tensors, stateful, {"tensors": [], "states": []})


# ----------------------------------------------------------------------------------------------------------
# The score


def test_a_timed_out_exercise_scores_zero():
    results = {
        "a": {"exercise": "1.1", "points": 2.0, "status": "passed", "message": ""},
        "b": {"exercise": "1.1", "points": 1.0, "status": "timeout", "message": "timed out"},
        "c": {"exercise": "1.2", "points": 3.0, "status": "passed", "message": ""},
    }
    g = grade(results)
    assert g["exercises"]["1.1"]["earned"] == 0 and g["exercises"]["1.2"]["earned"] == 3 and g["earned"] == 3


def test_the_exercise_table_is_github_classrooms():
    table = exercise_table(ROOT / "exercises")
    tests = json.loads((ROOT / ".github" / "classroom" / "autograding.json").read_text())["tests"]
    assert table == {t["name"].split()[-1]: t["points"] for t in tests}


# ----------------------------------------------------------------------------------------------------------
# Grade files read back by make grade: capped, checked, never a crash


TABLE = {"1.1": 2.0, "1.2": 3.0}


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "no grade.json"),
        ("{not json", "not JSON"),
        ('["a list"]', "no table of exercises"),
        ('{"exercises": {"1.1": {"earned": 2}, "9.9": {"earned": 100}}}', "9.9"),
        ('{"exercises": {"1.1": {"earned": "lots"}}}', "no number of points"),
        ('{"exercises": {"1.1": {"earned": NaN}}}', "no number of points"),
    ],
)
def test_a_bad_grade_file_is_a_clear_failure(tmp_path, content, problem):
    path = tmp_path / "grade.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(GradeFileError, match=problem):
        read_grade(path, TABLE)


def test_points_are_capped_by_the_table(tmp_path):
    path = tmp_path / "grade.json"
    path.write_text('{"exercises": {"1.1": {"earned": 999, "results": {"t": "timeout"}}, "1.2": {"earned": -5}}}')
    assert read_grade(path, TABLE) == ({"1.1": 2.0, "1.2": 0.0}, ["1.1"])


def _grade_submissions(monkeypatch):
    spec = importlib.util.spec_from_file_location("grade_submissions", ROOT / "scripts" / "grade_submissions.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "grade_submissions", module)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_make_grade_writes_every_row_whatever_the_grade_files_hold(tmp_path, monkeypatch):
    script = _grade_submissions(monkeypatch)
    grade_files = {  # what each learner's grading leaves in grade.json
        "ada": json.dumps({"exercises": {"1.1": {"earned": 2.0}}}),
        "bo": json.dumps({"exercises": {"1.1": {"earned": 2.0}, "9.9": {"earned": 100}}}),
        "cy": "{ broken",
    }

    class FakeGrader:  # stands in for `python -m pytest exercises/ ...`: writes the learner's grade.json
        def __init__(self, cmd, **kwargs):
            path = Path(cmd[cmd.index("--grade-json") + 1])
            path.write_text(grade_files[Path(cmd[cmd.index("--answers-dir") + 1]).name])
            self.pid = 0

        def wait(self, timeout=None):
            return 1  # some test failed: nobody has full points here

    monkeypatch.setattr(script.subprocess, "Popen", FakeGrader)
    for name in [*grade_files, "dee"]:
        (tmp_path / "submissions" / name).mkdir(parents=True)
    monkeypatch.setattr(script, "exercise_table", lambda folder: TABLE)
    original = script.grade_one

    def grade_one(submission, *args):
        if submission.name == "dee":
            raise OSError("disk full")
        return original(submission, *args)

    monkeypatch.setattr(script, "grade_one", grade_one)
    assert script.main([str(tmp_path / "submissions"), "--out", str(tmp_path / "grades.csv")]) == 0
    with open(tmp_path / "grades.csv") as f:
        rows = {r["learner"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["ada", "bo", "cy", "dee"]
    assert (rows["ada"]["1.1"], rows["ada"]["total"], rows["ada"]["status"]) == ("2", "2", "graded")
    for name, problem in (("bo", "9.9"), ("cy", "not JSON"), ("dee", "disk full")):
        assert rows[name]["status"] == "crashed" and problem in rows[name]["note"] and rows[name]["total"] == "0"
    assert not math.isnan(float(rows["bo"]["total"]))
