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


def import_graph() -> dict[str, set[str]]:
    """{module path: the minigpt modules it names in an import}, inside functions and TYPE_CHECKING too.

    (A package's __init__.py importing its own modules is not a circle: Python runs it before them.)
    """
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "minigpt").rglob("*.py"))
    return {m: imported_modules(ROOT / m) - {m} for m in modules}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None: a depth-first search that meets a module on its own path."""
    done, path = set(), []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        cycle = visit(node)
        if cycle:
            return cycle
    return None


def test_find_cycle_finds_a_planted_cycle():
    # the checker itself: a three-module circle is found, a chain is not
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_inside_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "an import circle inside minigpt/: " + " -> ".join(cycle or [])


MAX_MODULE_LINES = 500  # a module a learner reads in one sitting


def test_every_module_is_at_most_500_lines():
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in (ROOT / "minigpt").rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these modules (at most {MAX_MODULE_LINES} lines each): {long}"
