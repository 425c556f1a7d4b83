"""Figures of the chapters on mixed precision."""

from __future__ import annotations
