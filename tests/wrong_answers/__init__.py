"""Wrong answers the grader must catch, each a change to a copy of solutions/ (tests/grading_runs.Mistake).

classic.py is the first set: each names the test that catches it (tests/test_grading.py). chNN.py are the sets
written against each exercise's whole contract: any test of the exercise may catch them
(tests/test_grading_contracts.py). SETS holds them all, by name.
"""

import importlib
from pathlib import Path

from wrong_answers.classic import MISTAKES as CLASSIC

SETS = {"classic": CLASSIC}
for _path in sorted(Path(__file__).parent.glob("ch[0-9][0-9].py")):
    SETS[_path.stem] = importlib.import_module(f"wrong_answers.{_path.stem}").MISTAKES
