"""`make classroom-template OUT=dir`: the course for learners, without the reference answers, grades as the course
does and its stubs fail with their hints."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(3600)


def _script():
    return load_script("classroom_template")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("template") / "course"
    _script().make_template(out)
    return out


def test_the_template_holds_no_reference_answers(template):
    assert not (template / "solutions").exists() and not (template / "tests").exists()
    assert (template / "exercises" / "ch04_fp16_gradscaler.py").is_file() and (template / "minigpt").is_dir()
    assert not list(template.rglob("*.pyc")) and not (template / ".venv").exists()
    stubs = [p for p in (template / "exercises").glob("ch*_*.py")]
    assert stubs and all("SOLUTION" not in p.read_text() for p in stubs), "the stubs are the generated ones"


def test_the_template_grades_and_its_stubs_fail_with_their_hints(template, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(template)}  # its own minigpt/, not this one's
    cmd = [sys.executable, "-m", "pytest", "exercises/", "-q", "-p", "no:cacheprovider", "-k", "1.1 or 4.2"]
    done = subprocess.run(
        [*cmd, "--grade-json", str(tmp_path / "grade.json")], cwd=template, env=env, capture_output=True, text=True
    )
    grade = json.loads((tmp_path / "grade.json").read_text())
    assert done.returncode == 1 and set(grade["exercises"]) == {"1.1", "4.2"}, done.stdout[-3000:]
    assert {s for e in grade["exercises"].values() for s in e["results"].values()} == {"not done"}
    assert "Exercise 4.2 not done yet: " in done.stdout and "Traceback" not in done.stdout
    solutions = subprocess.run([*cmd, "--solutions"], cwd=template, env=env, capture_output=True, text=True)
    assert solutions.returncode != 0 and "solutions/ is not a folder here" in solutions.stdout + solutions.stderr


def test_the_template_is_made_only_in_a_new_folder(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not an empty folder"):
        _script().make_template(tmp_path / "full")
    with pytest.raises(SystemExit, match="inside the course"):
        _script().make_template(ROOT / "exercises" / "copy")


def test_the_template_grades_against_its_stored_outcomes(template, tmp_path):
    """Without solutions/, the contract checks read exercises/expected/: the reference answers, handed in as a
    learner's, earn every point there, and a wrong answer loses the same points as in the course."""
    import re
    import shutil

    honest, wrong = tmp_path / "honest", tmp_path / "wrong"
    for folder in (honest, wrong):
        folder.mkdir()
        for path in (ROOT / "solutions").glob("ch*_*.py"):
            text = re.sub(r"^\s*# (BEGIN|END) SOLUTION.*\n", "", path.read_text(), flags=re.M)
            (folder / path.name).write_text(text)
    text = (wrong / "ch09_toolbox.py").read_text()
    (wrong / "ch09_toolbox.py").write_text(text.replace("(max(sizes) if in_backward", "(sizes[0] if in_backward"))
    assert not (template / "solutions").exists() and (template / "exercises" / "expected").is_dir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(template)}
    grades = {}
    for name, folder, where in (("honest", honest, template), ("wrong", wrong, template), ("course", wrong, ROOT)):
        out = tmp_path / f"{name}.json"
        cmd = [sys.executable, "-m", "pytest", "exercises/", "-q", "-p", "no:cacheprovider", "--answers-dir"]
        cmd += [str(folder), "--grade-json", str(out)] + ([] if name == "honest" else ["-k", "9."])
        cmd += ["--expected", "reference"] if where == ROOT else []  # the course: the reference run live
        run_env = env if where == template else {**env, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(cmd, cwd=where, env=run_env, capture_output=True, text=True)
        grades[name] = json.loads(out.read_text())
        if name == "honest":
            assert grades[name]["earned"] == grades[name]["possible"] > 0, done.stdout[-4000:]
    assert grades["wrong"]["exercises"]["9.3"]["earned"] < grades["wrong"]["exercises"]["9.3"]["possible"]
    assert grades["wrong"]["exercises"] == grades["course"]["exercises"], "the template and the course grade alike"
    shutil.rmtree(honest)
