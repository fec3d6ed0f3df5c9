"""Errors of the data layer."""

from __future__ import annotations

from program.errors import SharpError


class DatasetError(SharpError, ValueError):
    """A dataset or corpus file is missing, unreadable or malformed (the message says where)."""
