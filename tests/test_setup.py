"""The course machinery: dependencies agree everywhere, and the CLI tables are computed."""

import json
import re
from pathlib import Path

import tomllib

from minigpt.cli import main
from minigpt.model import PRESETS, count_params

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch"}  # conda package name -> pip name, where they differ
# Extras that environment.yml leaves out on purpose: "bench" (torchao, the reference rows of make bench) is
# installed by hand where wanted, `pip install -e '.[bench]'`, under conda or not; no test needs it
OPTIONAL_EXTRAS = {"bench"}


def _name_and_spec(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"([A-Za-z0-9_.\-]+)\s*(.*)", requirement.strip()).groups()
    return name.lower(), spec.replace(" ", "")


def pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for name, extra in project["optional-dependencies"].items():
        reqs += extra if name not in OPTIONAL_EXTRAS else []
    return dict(_name_and_spec(r) for r in reqs)


def conda_requirements() -> dict[str, str]:
    """The conda dependencies of environment.yml (a flat list: no YAML library needed)."""
    deps, inside = {}, False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if line.startswith("dependencies:"):
            inside = True
        elif inside and re.match(r"^  - [A-Za-z]", line):
            name, spec = _name_and_spec(line[4:])
            deps[CONDA_NAMES.get(name, name)] = spec
    deps.pop("pip", None)
    deps.pop("python", None)
    return deps


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    assert conda_requirements() == pyproject_requirements()


def test_environment_yml_installs_the_package_in_editable_mode():
    assert "--editable ." in (ROOT / "environment.yml").read_text()


def test_torch_has_a_lower_bound_and_the_setup_pins_the_cpu_build():
    assert pyproject_requirements()["torch"].startswith(">=")
    assert "TORCH  ?= torch==2.13.0" in (ROOT / "Makefile").read_text()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make demo" in readme
    assert readme.index("make demo") < readme.index("## ")  # the two commands come first
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_make_test_runs_every_test_and_every_notebook():
    """Nothing is left out of `make test`: all of tests/ (the grader included) and nbval over every
    chapter and solution notebook, each of which exists with stored outputs."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest: setup lint\n")[1].split("\n\n")[0]  # lint: the style gate, first
    lint = makefile.split("\nlint: setup\n")[1].split("\n\n")[0]
    assert "ruff check $(LINTED)" in lint and "ruff format --check $(LINTED)" in lint
    assert "pytest tests/" in recipe and "--ignore" not in recipe and "--deselect" not in recipe
    assert "--nbval chapters/ solutions/" in recipe
    n_chapters = len(list((ROOT / "chapters").glob("[0-9][0-9]_*.md")))  # each chapter's text, paired below
    assert n_chapters >= 10
    for folder in ("chapters", "solutions"):
        notebooks = sorted((ROOT / folder).glob("*.ipynb"))
        assert len(notebooks) == n_chapters, folder
        for path in notebooks:
            cells = json.loads(path.read_text())["cells"]
            assert any(c.get("outputs") for c in cells if c["cell_type"] == "code"), f"{path} has no outputs"


def test_params_json_is_computed_from_the_configs(capsys):
    assert main(["params", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["parameters"] for r in rows} == {n: count_params(c) for n, c in PRESETS.items()}


def test_readme_preset_table_matches_the_code():
    """The README's preset table is pasted from `minigpt params`: it must not drift from the code."""
    readme = (ROOT / "README.md").read_text()
    for name in ("10m", "30m", "125m"):
        assert f"| {name} " in readme and f"{count_params(PRESETS[name]):,}" in readme, name


def test_every_notebook_badge_and_setup_cell_use_the_one_repo_slug():
    import importlib.util

    spec = importlib.util.spec_from_file_location("badges", ROOT / "scripts" / "badges.py")
    badges = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(badges)
    slug = badges.current_slug()
    for path in badges.notebooks():
        text = path.read_text()
        assert badges.stamp(text, slug) == text, f"{path.name} points to another repo: run make badges"
        if path.parent.name == "chapters":
            assert f"colab.research.google.com/github/{slug}/blob/main/chapters/{path.name}" in text, path.name


def test_restamping_changes_every_url():
    import importlib.util

    spec = importlib.util.spec_from_file_location("badges", ROOT / "scripts" / "badges.py")
    badges = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(badges)
    cell = (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        "(https://colab.research.google.com/github/a/b/blob/main/chapters/01_x.ipynb)\n"
        '!pip install -q "minigpt-course @ git+https://github.com/a/b"'
    )
    out = badges.stamp(cell, "me/course")
    assert "github/me/course/blob/main" in out and "git+https://github.com/me/course" in out and "/a/b" not in out
