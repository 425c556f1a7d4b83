"""Run every benchmark and write RESULTS.md (machine, torch, date, tables, targets) and PNG plots next to it.

    make bench                                       # = python -m benchmarks.run_all, ~40 min on 2 cores
    python -m benchmarks.run_all --quick --out /tmp/b  # tiny sizes, seconds: checks that everything runs
    python -m benchmarks.run_all --only lora --merge   # re-measure some sections, keep the others as they were

Each benchmark runs in a fresh Python process, prints its table and PASS/FAIL per target. The exit status
is 1 when a target is missed (never in --quick mode, whose sizes are too small to judge) or a benchmark crashed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from benchmarks import (
    bench_accum_rss,
    bench_accumulation,
    bench_bf16_quality,
    bench_checkpointing,
    bench_compile,
    bench_corpus,
    bench_finetune_plan,
    bench_largest,
    bench_loop,
    bench_lora,
    bench_loss_offload,
    bench_memory_grid,
    bench_mfu,
    bench_optimizer_quality,
    bench_optimizers,
    bench_precision,
    bench_sharding,
    bench_step_time,
)
from benchmarks.benchlib import Check, Section, machine_is_busy, machine_rows, table, token_data
from benchmarks.merge_results import KeptSection, kept_sections, order_key, section_number
from minigpt.data import TokenData
from minigpt.results import KEPT_ROW

BENCHMARKS = {
    "corpus": bench_corpus,
    "loop": bench_loop,
    "mfu": bench_mfu,
    "precision": bench_precision,
    "bf16_quality": bench_bf16_quality,
    "checkpointing": bench_checkpointing,
    "accumulation": bench_accumulation,
    "accum_rss": bench_accum_rss,
    "memory_grid": bench_memory_grid,
    "compile": bench_compile,
    "sharding": bench_sharding,
    "optimizers": bench_optimizers,
    "optimizer_quality": bench_optimizer_quality,
    "largest": bench_largest,
    "lora": bench_lora,
    "finetune_plan": bench_finetune_plan,
    "loss_offload": bench_loss_offload,
    "step_time": bench_step_time,
}


def _run_and_flush(name: str, quick: bool, out: Path, device: str, data: TokenData) -> Section:
    section = BENCHMARKS[name].run(quick, out, torch.device(device), data)
    sys.stdout.flush()  # what the benchmark printed comes before what the parent prints next
    return section


def run_in_fresh_process(name: str, quick: bool, out: Path, device: torch.device, data: TokenData) -> Section:
    """Run one benchmark in a new Python process and return its Section.

    In one long process a benchmark inherits the heap of the ones before it, and on the CPU that changed
    its timings: the checkpointing time ratios came out 0.1-0.2 higher after the other benchmarks than
    when run alone. A fresh process gives every benchmark the numbers it would give on its own.
    """
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_run_and_flush, name, quick, out, str(device), data).result()


def results_markdown(
    sections: list[Section],
    header: list[tuple[str, str]],
    quick: bool,
    busy: str | None,
    seconds: float,
    command: str,
    kept: list[KeptSection] = (),
) -> str:
    """RESULTS.md: where and when, a summary of every target, then one section per benchmark.

    kept: sections of an earlier RESULTS.md not measured again (--merge), placed by their numbers, their
    targets counted, and the header says when each was measured."""
    rows = [[s.title, c.target, c.measured, "PASS" if c.passed else "FAIL"] for s in sections for c in s.checks]
    rows += [row for k in kept for row in k.target_rows]
    rows.sort(key=lambda row: order_key(row[0]))  # a stable sort: each section's targets keep their order
    passed = sum(row[3] == "PASS" for row in rows)
    header = list(header)
    if kept:
        dates: dict[str, list[str]] = {}
        for k in sorted(kept, key=lambda k: order_key(k.title)):
            dates.setdefault(k.measured, []).append(section_number(k.title))
        header.append((KEPT_ROW, "; ".join(f"{', '.join(n)}: measured {when}" for when, n in dates.items())))
    parts = [
        "# Benchmarks",
        f"Written by `{command}` in {seconds / 60:.1f} min. Timings: median of the timed "
        "runs after warm-up; spread = (max - min) / median of those runs.",
    ]
    if quick:
        parts.append("> **QUICK RUN** (tiny sizes): it checks that the benchmarks run; its numbers judge nothing.")
    if busy:
        parts.append(f"> **Warning:** {busy}.")
    parts.append(table([list(row) for row in header], ["what", "value"]))
    parts.append(
        f"## Targets: {passed} of {len(rows)} met\n\n" + table(rows, ["benchmark", "target", "measured", "result"])
    )
    bodies = [(s.title, s.markdown()) for s in sections] + [(k.title, k.markdown) for k in kept]
    parts += [markdown for _, markdown in sorted(bodies, key=lambda body: order_key(body[0]))]
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the code paths in seconds")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent, help="where RESULTS.md and PNGs go")
    parser.add_argument("--device", default="cpu", help="cpu (the course machine) or cuda")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run only these benchmarks")
    parser.add_argument(
        "--merge", action="store_true", help="with --only: keep the other sections of the RESULTS.md already in --out"
    )
    args = parser.parse_args(argv)
    if args.merge and not args.only:
        parser.error("--merge keeps the sections that --only leaves out: name the benchmarks to re-run with --only")
    earlier = args.out / "RESULTS.md"
    if args.merge and not earlier.exists():
        parser.error(f"--merge: there is no {earlier} to keep sections from; run without --merge")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU here")
    args.out.mkdir(parents=True, exist_ok=True)

    t_start, busy, header = time.perf_counter(), machine_is_busy(), machine_rows(device)
    if busy:
        print(f"WARNING: {busy}", file=sys.stderr)
    data = token_data(args.quick)
    sections = []
    for name in args.only or BENCHMARKS:
        print(f"\n=== {name} ===", flush=True)
        t0 = time.perf_counter()
        try:
            section = run_in_fresh_process(name, args.quick, args.out, device, data)
        except Exception as error:  # noqa: BLE001 - one crashed benchmark must not hide the others
            detail = traceback.format_exc()
            print(detail, file=sys.stderr)
            section = Section(
                name,
                f"```\n{detail}\n```",
                [Check(f"{name} runs to the end", f"crashed: {type(error).__name__}: {error}", False)],
                seconds=time.perf_counter() - t0,
            )
        if name != "memory_grid":
            print(section.body)
        section.report()
        sections.append(section)

    command = (
        "python -m benchmarks.run_all"
        + (" --quick" if args.quick else "")
        + (f" --device {args.device}" if args.device != "cpu" else "")
        + (f" --only {' '.join(args.only)} --merge" if args.merge else "")
    )
    kept = kept_sections(earlier.read_text(encoding="utf-8"), {s.title for s in sections}) if args.merge else []
    seconds = time.perf_counter() - t_start
    text = results_markdown(sections, header, args.quick, busy, seconds, command, kept=kept)
    (args.out / "RESULTS.md").write_text(text)
    failed = [c for s in sections for c in s.checks if not c.passed]
    print(
        f"\nwrote {args.out / 'RESULTS.md'} in {(time.perf_counter() - t_start) / 60:.1f} min; "
        f"{len(failed)} target(s) missed"
    )
    crashed = any(c.target.endswith("runs to the end") for c in failed)
    return 1 if crashed or (failed and not args.quick) else 0


if __name__ == "__main__":
    sys.exit(main())
