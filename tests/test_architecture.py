"""docs/ARCHITECTURE.md is the package's map: every module it names exists, and every module is on it."""

import ast
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


def layers() -> dict[str, int]:
    """{module path: its layer number}, read from the map's bold layer headings and their tables."""
    layer, found = 0, {}
    for line in MAP.read_text(encoding="utf-8").splitlines():
        if line.startswith("**"):
            layer += 1
        found.update({path: layer for path in re.findall(r"^\| `(minigpt/[\w/]+\.py)`", line)})
    return found


def imported_modules(path: Path) -> set[str]:
    """The minigpt module files `path` imports (`from minigpt.x import y` may name the module minigpt/x/y.py)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "minigpt":
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name == "minigpt":  # the package itself (`from minigpt import train` names minigpt/train.py)
                continue
            as_path = ROOT / name.replace(".", "/")
            for candidate in (as_path.with_suffix(".py"), as_path / "__init__.py"):
                if name.split(".")[0] == "minigpt" and candidate.is_file():
                    found.add(candidate.relative_to(ROOT).as_posix())
    return found


def test_no_module_imports_from_a_layer_above_its_own():
    layer = layers()
    assert len(set(layer.values())) >= 4, "the map's layers were not found: each starts with a **bold** heading"
    upward = sorted(
        f"{module} (layer {layer[module]}) imports {target} (layer {layer[target]})"
        for module in layer
        for target in imported_modules(ROOT / module)
        if target in layer and layer[target] > layer[module]
    )
    assert not upward, "imports against the layering of docs/ARCHITECTURE.md:\n" + "\n".join(upward)
