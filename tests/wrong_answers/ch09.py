"""Wrong answers to chapter 9's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    "9.3: the first parameter taken as the largest": Mistake(
        "9.3", "state_bytes", "", ("4 * (max(sizes) if in_backward", "4 * (sizes[0] if in_backward")
    ),
}
