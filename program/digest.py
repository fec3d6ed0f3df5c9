"""The one digest of a JSON-able value: sha256 over its sorted-key JSON (other objects as ``str``).

Saved programs, calibrators, results files, data samples and replay recordings are named or checked by
it. ``length`` cuts the hex digest where a short name will do; a stored name depends on the length its
caller gives, so a call site keeps its length (a new length only starts new files).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(obj: Any, length: int | None = None) -> str:
    """Hex sha256 of ``json.dumps(obj, sort_keys=True, default=str)``; the first ``length`` characters."""
    full = hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
    return full[:length] if length else full
