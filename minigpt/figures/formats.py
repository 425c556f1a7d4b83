"""Figures of the chapters on formats."""

from __future__ import annotations
