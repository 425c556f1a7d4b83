"""Figures of the chapters on memory savers."""

from __future__ import annotations
