"""run_all --merge: the sections not measured again survive word for word, with their targets and their date."""

from benchmarks.benchlib import Check, Section
from benchmarks.merge_results import earlier_sections, kept_sections, order_key
from benchmarks.run_all import results_markdown

HEADER = [("date", "2026-11-24 12:06 UTC"), ("device", "cpu Some CPU")]


def _earlier() -> str:
    sections = [
        Section("0. The corpus", "a table | with a pipe", [Check("loss below 3", "2.1 | 2.2", True)]),
        Section("9b. 8-bit AdamW", "old body", [Check("within 0.03", "0.05", False)]),
        Section("10. LoRA", "lora body", [Check("80%", "46%", False), Check("2%", "1.5%", True)]),
    ]
    return results_markdown(sections, HEADER, False, None, 60.0, "python -m benchmarks.run_all")


def test_earlier_sections_parse_back_with_their_target_rows():
    parsed = {s.title: s for s in earlier_sections(_earlier())}
    assert list(parsed) == ["0. The corpus", "9b. 8-bit AdamW", "10. LoRA"]
    assert parsed["0. The corpus"].target_rows == [["0. The corpus", "loss below 3", "2.1 | 2.2", "PASS"]]
    assert len(parsed["10. LoRA"].target_rows) == 2
    assert "a table | with a pipe" in parsed["0. The corpus"].markdown


def test_merge_replaces_what_was_measured_again_and_keeps_the_rest():
    earlier = _earlier()
    new = [Section("9b. 8-bit AdamW", "new body", [Check("within 0.03", "0.01", True)])]
    kept = kept_sections(earlier, {s.title for s in new})
    text = results_markdown(
        new,
        [("date", "2026-11-25 18:00 UTC")],
        False,
        None,
        30.0,
        "run_all --only x --merge",
        kept=kept,
    )
    assert "new body" in text and "old body" not in text
    assert "lora body" in text and "a table | with a pipe" in text
    assert "## Targets: 3 of 4 met" in text  # 2 kept PASS + the new PASS, the kept LoRA FAIL
    assert "2026-11-24 12:06 UTC" in text  # the kept sections say when they were measured
    # sections stay in their numbered order: 0, 9b, 10
    assert text.index("## 0. The corpus") < text.index("## 9b. 8-bit AdamW") < text.index("## 10. LoRA")


def test_order_key_sorts_numbers_not_strings():
    titles = ["10. LoRA", "9b. q", "9. o", "12. largest", "0. corpus", "unnumbered"]
    assert sorted(titles, key=order_key) == ["0. corpus", "9. o", "9b. q", "10. LoRA", "12. largest", "unnumbered"]


def test_a_section_kept_twice_keeps_its_first_date():
    once = results_markdown(
        [Section("9b. 8-bit AdamW", "new", [])],
        [("date", "2026-11-25 18:00 UTC"), ("device", "cpu B")],
        False,
        None,
        1.0,
        "run_all",
        kept=kept_sections(_earlier(), {"9b. 8-bit AdamW"}),
    )
    twice = kept_sections(once, {"10. LoRA"})
    when = {k.title: k.measured for k in twice}
    assert when["0. The corpus"] == "2026-11-24 12:06 UTC on cpu Some CPU"  # from the first run, not the second
    assert when["9b. 8-bit AdamW"] == "2026-11-25 18:00 UTC on cpu B"
