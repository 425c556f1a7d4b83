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
pytestmark = pytest.mark.timeout(600)


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
