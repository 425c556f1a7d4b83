"""A `minigpt train` whose process 1 fails at its second step: run by tests/test_torchrun_output.py under torchrun.

    torchrun --nproc_per_node 2 tests/torchrun_failing_rank.py train --preset tiny ...

Process 1's step raises a RuntimeError of its own; process 0, waiting for it in the gradient all-reduce, sees
its peer's connection close. The run must end on both processes with minigpt's one line, from process 1.
"""

from __future__ import annotations

import os
import sys

from minigpt import train as train_module
from minigpt.cli import main

if os.environ.get("RANK") == "1":
    real_step, calls = train_module.train_step, []

    def failing_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("process 1 failed on purpose at step 2")
        return real_step(*args, **kwargs)

    train_module.train_step = failing_step

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
