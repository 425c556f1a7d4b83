"""Lecture demos: `minigpt demo NAME` runs a short live demonstration an instructor can project.

Each demo prints a few tables and a one-line conclusion, and saves its figures as PNG files in `out` (demo_out/).
Every number comes from the package (minigpt.formats, precision, memory, train, plan): a demo only calls and shows.
Each is sized to its point: at the default "lecture" size every demo takes under a minute on a 2-core CPU;
size="full" runs the longer versions (more steps, the 10m preset where a lecture run uses tiny), and
size="quick" the tiny sizes the tests use.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from minigpt.demos.finetuning import demo_lora
from minigpt.demos.floats import demo_formats
from minigpt.demos.largest import demo_largest
from minigpt.demos.memory_anatomy import demo_memory
from minigpt.demos.memory_savers import demo_accumulation, demo_checkpointing
from minigpt.demos.mixed_precision import demo_autocast, demo_scaler
from minigpt.demos.planning import demo_plan
from minigpt.demos.sharding import demo_sharding
from minigpt.demos.toolbox import demo_toolbox
from minigpt.demos.training import demo_train

# name on the command line -> demo, in the order `minigpt demo all` runs them
DEMOS: dict[str, Callable[[Path, str], list[Path]]] = {
    "train": demo_train,
    "formats": demo_formats,
    "memory": demo_memory,
    "autocast": demo_autocast,
    "scaler": demo_scaler,
    "accumulation": demo_accumulation,
    "checkpointing": demo_checkpointing,
    "plan": demo_plan,
    "sharding": demo_sharding,
    "toolbox": demo_toolbox,
    "largest": demo_largest,
    "lora": demo_lora,
}
DEMO_CHOICES = (*DEMOS, "all")
SIZES = ("quick", "lecture", "full")


def run_demo(name: str, out: Path = Path("demo_out"), size: str = "lecture") -> int:
    """Run the demo called `name` ("all": every demo in order), saving its figures in `out`; 0 on success.

    size: "lecture" (the default, each demo under a minute on a 2-core CPU), "full" or "quick" (the tests').
    """
    if name not in DEMO_CHOICES:
        raise ValueError(f"unknown demo {name!r}; choose one of: {', '.join(DEMO_CHOICES)}")
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose one of: {', '.join(SIZES)}")
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        print(
            "minigpt demo: error: the demos draw their figures with matplotlib, which is not installed; "
            "pip install matplotlib (or pip install -e '.[course]')",
            file=sys.stderr,
        )
        return 2
    out = Path(out)
    t_all = time.perf_counter()
    for demo in DEMOS if name == "all" else [name]:
        print(f"\n{'=' * 20} demo: {demo} {'=' * 20}\n{DEMOS[demo].__doc__.splitlines()[0]}\n")
        t0 = time.perf_counter()
        DEMOS[demo](out, size)
        print(f"({demo}: {time.perf_counter() - t0:.0f} s)")
    if name == "all":
        print(f"\nall demos: {time.perf_counter() - t_all:.0f} s; figures in {out}/")
    return 0
