"""Figures of the chapters on memory anatomy."""

from __future__ import annotations
