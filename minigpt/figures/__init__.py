"""The chapters' longer figures as functions, so a notebook cell shows its idea in a few lines.

One module per group of chapters, named like the lecture demos; every figure takes measured numbers as
arguments and draws them in the course's colours (minigpt.style). Nothing here measures anything.
"""
