"""minigpt.results: a RESULTS.md section, quoted with its own date (a section kept by --merge keeps its run's)."""

from minigpt.results import KEPT_ROW, measured_when, results_section

KEPT = (
    "0, 2: measured 2026-11-24 12:06 UTC on cpu Epyc; "
    "9b, Peak RSS against --accum: measured 2026-11-25 17:51 UTC on cpu Xeon"
)
RESULTS = f"""# Benchmarks

| what   | value |
|--------|-------|
| date   | 2026-11-27 04:09 UTC |
| device | cpu Xeon |
| {KEPT_ROW} | {KEPT} |

## Targets: 2 of 2 met

## 2. Model FLOPs utilization
mfu table

## 9b. 8-bit AdamW: val loss
quality table

## 12. The largest model this machine can train
largest table

## Peak RSS against --accum
rss table
"""


def test_a_kept_section_has_its_own_date_and_a_new_one_the_runs():
    assert measured_when(RESULTS, "2") == "2026-11-24 12:06 UTC on cpu Epyc"
    assert measured_when(RESULTS, "9b") == "2026-11-25 17:51 UTC on cpu Xeon"
    assert measured_when(RESULTS, "12") == "2026-11-27 04:09 UTC on cpu Xeon"
    assert measured_when(RESULTS, "Peak RSS against --accum") == "2026-11-25 17:51 UTC on cpu Xeon"


def test_a_section_is_found_by_a_word_of_its_title_and_ends_at_the_next(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text(RESULTS, encoding="utf-8")
    when, text = results_section("largest", path)
    assert when == "2026-11-27 04:09 UTC on cpu Xeon"
    assert text.startswith("## 12. The largest model") and "largest table" in text and "rss table" not in text
    assert results_section("AdamW", path)[0] == "2026-11-25 17:51 UTC on cpu Xeon"  # 9b: a letter after the number


def test_no_file_or_no_such_section_is_none(tmp_path):
    assert results_section("largest", tmp_path / "missing.md") is None  # a pip install has no RESULTS.md
    path = tmp_path / "RESULTS.md"
    path.write_text(RESULTS, encoding="utf-8")
    assert results_section("LoRA", path) is None
