"""Broadcasting binary operators (implemented in :mod:`templtune.te.broadcast`)."""

from __future__ import annotations

from templtune.te.broadcast import (
    add,
    broadcast_shape,
    divide,
    maximum,
    minimum,
    multiply,
    subtract,
)

__all__ = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "broadcast_shape"]
