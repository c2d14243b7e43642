"""Argument handling shared by the distributions: promotion to one inexact dtype and shape."""

from __future__ import annotations

from kiln.scipy.special import _promote

__all__ = ["promote"]


def promote(name: str, *args):
    """The arguments as kiln arrays of one inexact dtype and one broadcast shape."""
    return _promote(name, *args)
