"""Figures of the chapters on planning."""

from __future__ import annotations
