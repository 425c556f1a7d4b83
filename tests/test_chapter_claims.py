"""What a chapter says about itself and about the others holds: no stray debug lines in its stored outputs,
every "chapter N" pointing at the chapter that teaches the topic named beside it, and every exercise number
in the prose one that exists in exercises/.

The numeric and comparative claims of the prose are checked inside the chapters themselves: each is printed
from a measurement or followed by a check cell that asserts it, so a re-run that contradicts the text fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))
NOTEBOOKS = sorted([*(ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"), *(ROOT / "solutions").glob("ch*.ipynb")])


# Stray debug lines ----------------------------------------------------------------------------------------------

# Lines a library's C++ side writes to the process's stderr: they land in a cell's output without being asked.
DEBUG_LINE = re.compile(
    r"^\s*(USDT:|STAGE:\d{4}-|\[?[IWEF]\d{4} \d\d:\d\d:\d\d|\[W\d{4})"  # kineto, glog ([W1124 11:25:44 ...])
    r"|\.(cpp|cc|cu|h):\d+\]",  # file.cpp:52] anywhere in the line
)


def output_text(output: dict) -> str:
    if "text" in output:
        return "".join(output["text"])
    return "".join(output.get("data", {}).get("text/plain", ""))


def debug_lines(notebook: Path) -> list[str]:
    """'cell N: line' for every stored output line that is a library's debug log, not the cell's own output."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return [
        f"{notebook.name} cell {i}: {line.strip()[:120]}"
        for i, cell in enumerate(cells)
        for output in cell.get("outputs", [])
        for line in output_text(output).splitlines()
        if DEBUG_LINE.search(line)
    ]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_stored_output_holds_a_debug_line(notebook):
    assert not debug_lines(notebook), "silence the library that printed these, then re-run the chapter:\n" + "\n".join(
        debug_lines(notebook)
    )


@pytest.mark.parametrize(
    "line, stray",
    [
        ("USDT:2026-11-24 11:25:44 16842:16842 SyncActivityProfilerHandler.cpp:52] profiler_start", True),
        ("[W1124 11:25:44.123 ProcessGroupGloo.cpp:12] Warning: ...", True),
        ("STAGE:2024-01-01 12:00:00 1:1 ActivityProfilerController.cpp:314] Completed Stage: Warm Up", True),
        ("the step peaks at 'backward: embedding'", False),
        ("W = 0.25, I = 3", False),
    ],
)
def test_the_debug_line_pattern(line, stray):
    assert bool(DEBUG_LINE.search(line)) == stray


# "chapter N": the topic named beside it is taught there ---------------------------------------------------------

# Where each topic is taught: the chapter that runs it, not one that only names it. A reference "chapter N"
# is checked against the topics of its own sentence, each topic going with the reference nearest to it.
TOPICS = {
    r"\bFSDP\b|ZeRO(?: stage |-)3|\bshard": {8},
    r"\bZeRO\b": {7, 8},
    r"\bDDP\b|data parallel|all-reduce|no_sync": {5, 7, 8},
    r"GradScaler|loss scal": {4},
    r"autocast|mixed.precision": {3, 4},
    r"\baccumulat": {5, 7},
    r"checkpointing|recompute": {6, 7},
    r"\bplanner\b": {7},
    r"lost.update": {1, 3},
    r"subnormal|mantissa|exponent bits": {1},
    r"saved.tensor|activation memory": {2, 3, 6},
}
REFERENCE = re.compile(r"\b[Cc]hapter (\d+)\b(?!:)")  # "Chapter 8: ..." is a title, not a reference


def markdown_text(md: Path) -> str:
    """A chapter's prose: its markdown cells, without the front matter and the code cells."""
    text = re.sub(r"```\{code-cell\}.*?```", " ", md.read_text(encoding="utf-8"), flags=re.DOTALL)
    return text.split("\n---\n", 1)[-1]


def reference_span(sentence: str, m: re.Match) -> tuple[int, int]:
    """Where a reference reaches: "chapter 1 (bf16's mantissa bits)" holds its parenthesis."""
    end = m.end()
    if sentence[end : end + 2] == " (" and ")" in sentence[end:]:
        end = sentence.index(")", end)
    return m.start(), end


def owner(refs: list[tuple[int, int, int]], at: int) -> int:
    """The chapter a topic at `at` goes with: the reference whose parenthesis holds it, else the first
    reference after it ("FSDP (chapter 8)"), else the last one before it ("chapter 5's accumulation")."""
    inside = [n for start, end, n in refs if start <= at <= end]
    after = [n for start, _, n in refs if start > at]
    return (inside or after or [refs[-1][2]])[0]


def misplaced_references(text: str) -> list[str]:
    """'chapter N: topic' for each reference whose nearest topic in its clause is taught elsewhere.

    A clause: the text between two of . ; : , and blank lines, code spans left out ("what FSDP does
    (chapter 8)", "chapter 5's accumulation"); each topic goes with one reference (owner).
    """
    problems = []
    text = re.sub(r"`[^`]*`", " ", text)  # code names a function or a flag, not a topic
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z*(])|\n\s*\n|[,;:]\s", text):
        refs = [(*reference_span(sentence, m), int(m.group(1))) for m in REFERENCE.finditer(sentence)]
        if not refs:
            continue
        for pattern, homes in TOPICS.items():
            for m in re.finditer(pattern, sentence, re.IGNORECASE):
                chapter = owner(refs, m.start())
                if chapter not in homes:
                    problems.append(f"chapter {chapter}: {m.group()!r} in {' '.join(sentence.split())[:160]!r}")
    return problems


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_references_point_where_the_topic_is_taught(chapter):
    problems = misplaced_references(markdown_text(chapter))
    assert not problems, "point at the chapter that teaches it:\n" + "\n".join(problems)


def test_every_topic_is_in_its_home_chapters():
    """The map above stays honest: each topic appears in the prose of every chapter it names as its home."""
    texts = {int(md.name[:2]): markdown_text(md) for md in CHAPTERS}
    for pattern, homes in TOPICS.items():
        for n in homes:
            assert re.search(pattern, texts[n], re.IGNORECASE), f"{pattern!r} is not in chapter {n}"


@pytest.mark.parametrize(
    "text, wrong",
    [
        ("Split the state, which is what ZeRO stage 3 and FSDP do (chapter 7).", True),
        ("Split the state, which is what ZeRO stage 3 and FSDP do (chapter 8).", False),
        ("Autocast shrinks the activations (chapter 3), not the static memory.", False),
        ("That is what the GradScaler does (chapter 3).", True),
        ("A 16-bit autocast (chapter 3) and accumulation (chapter 5) come first.", False),
        ("Chapter 1 (bf16's mantissa bits and lost updates) and chapter 2 (autocast's savings)", True),
        ("Chapter 1 (bf16's mantissa bits and lost updates) and chapter 2 (static memory)", False),
        ("# Chapter 8: When One Device Is Not Enough: DDP, ZeRO-1 and FSDP", False),
    ],
)
def test_the_reference_check(text, wrong):
    assert bool(misplaced_references(text)) == wrong


# Exercise numbers ------------------------------------------------------------------------------------------------

STUB = re.compile(r"""raise NotImplementedError\(\s*["']Exercise (\d+\.\d+):""")
EXERCISE_REF = re.compile(r"\b[Ee]xercises? (\d+(?:\.\d+)?)\b")


def existing_exercises() -> set[str]:
    return {n for module in (ROOT / "exercises").glob("ch[0-9][0-9]_*.py") for n in STUB.findall(module.read_text())}


def unknown_exercises(text: str, known: set[str]) -> list[str]:
    return [m.group() for m in EXERCISE_REF.finditer(text) if m.group(1) not in known]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_exercise_named_in_a_chapter_exists(chapter):
    """Code comments included: "exercise 4" names no exercise when they are numbered 4.1-4.4."""
    unknown = unknown_exercises(chapter.read_text(encoding="utf-8"), existing_exercises())
    assert not unknown, f"no such exercise in exercises/: {unknown}"


def test_the_exercise_check():
    known = existing_exercises()
    assert {"4.1", "8.3"} <= known
    assert unknown_exercises("(exercise 4, live) and Exercise 4.9, but exercise 4.1", known) == [
        "exercise 4",
        "Exercise 4.9",
    ]
