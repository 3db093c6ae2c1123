"""Up-front checks of builder and runner parameters: a bad value raises ``ValueError`` naming
the parameter when the object is made, not a silent empty tuning run or a batch of failures."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["check_count", "check_number"]


def check_count(owner: str, name: str, value: Any, minimum: int = 1,
                allow_none: bool = False) -> None:
    """Require an integer ``>= minimum`` (bools refused; ``None`` when ``allow_none``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value}")


def check_number(owner: str, name: str, value: Any, *, positive: bool = False) -> None:
    """Require a finite real number ``>= 0`` (``> 0`` when ``positive``)."""
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real)
          and math.isfinite(float(value)))
    if ok:
        ok = value > 0 if positive else value >= 0
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{owner}: {name} must be a finite number {bound}, got {value!r}")
