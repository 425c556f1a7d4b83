"""minigpt: a small GPT and the tools to measure, predict and plan the memory it takes to train."""

__version__ = "0.1.0"
