"""Switches on the grader for this folder: the plugin is minigpt/grading/plugin.py (`pytest exercises/ --help`)."""

from minigpt.grading.plugin import *  # noqa: F403 - pytest finds the plugin's hooks and fixtures by name here
