"""docs/ARCHITECTURE.md is the package's map: every module it names exists, and every module is on it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "ARCHITECTURE.md"


def named_paths() -> set[str]:
    """Every `minigpt/...py` path the map names in backticks."""
    return set(re.findall(r"`(minigpt/[\w/]+\.py)`", MAP.read_text(encoding="utf-8")))


def test_every_module_on_the_map_exists():
    missing = sorted(p for p in named_paths() if not (ROOT / p).is_file())
    assert named_paths() and not missing, f"docs/ARCHITECTURE.md names modules that do not exist: {missing}"


def test_every_module_of_the_package_is_on_the_map():
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "minigpt").rglob("*.py")}
    faces = {m for m in modules if m.endswith("/__main__.py")}  # `python -m minigpt`: one line, no idea of its own
    unmapped = sorted(modules - faces - named_paths())
    assert not unmapped, f"add these modules to docs/ARCHITECTURE.md (one line each): {unmapped}"
