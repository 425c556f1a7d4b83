"""A copy of the course for learners, without the reference answers: `make classroom-template OUT=dir`.

The reference answers ship with the course in solutions/ (the chNN_*.py files and the solution notebooks),
and no grader can stop an answer that reads them. This copies the course's files (those git tracks or would
track; outside a git checkout, all but caches and virtual environments) into OUT, leaving out solutions/,
tests/ (the course's own tests, which grade solutions/) and .ci/ (which runs them). In the copy,
`pytest exercises/` grades as it does here, and the stubs fail with their hints. Push OUT as the template
repository of a GitHub Classroom assignment.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = ("solutions", "tests", ".ci")  # the reference answers, the tests that grade them, and their CI
NEVER_COPIED = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "slides"}


def course_files(root: Path) -> list[Path]:
    """The course's files, relative to root: the files git tracks or would (not those it ignores), or outside a
    git checkout every file but caches and virtual environments."""
    try:
        command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        listed = subprocess.run(command, cwd=root, capture_output=True, check=True, text=True).stdout.split("\0")
        files = [Path(name) for name in listed if name]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = [
            p.relative_to(root)
            for p in root.rglob("*")
            if p.is_file() and not NEVER_COPIED & set(p.relative_to(root).parts) and ".egg-info" not in str(p)
        ]
    return sorted(f for f in files if f.parts[0] not in LEFT_OUT and (root / f).is_file())


def make_template(out: Path, root: Path = ROOT) -> list[Path]:
    """Copy the course without its reference answers into `out` (new or empty); return the files copied."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"{out} exists and is not an empty folder: choose a new one")
    if out.resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"{out} is inside the course: choose a folder outside {root}")
    files = course_files(root)
    for name in files:
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to create")
    args = parser.parse_args(argv)
    files = make_template(args.out)
    print(f"wrote {len(files)} files to {args.out}: the course without {', '.join(f'{d}/' for d in LEFT_OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
