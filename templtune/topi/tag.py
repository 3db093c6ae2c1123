"""Operator tag strings (as TVM's topi): schedules and the auto-scheduler dispatch on them."""

from __future__ import annotations

ELEMWISE = "elemwise"
BROADCAST = "broadcast"
INJECTIVE = "injective"
COMM_REDUCE = "comm_reduce"
COMM_REDUCE_IDX = "comm_reduce_idx"


def is_injective(tag: str) -> bool:
    """Elementwise, broadcast and injective ops can be inlined into their consumers."""
    return tag in (ELEMWISE, BROADCAST) or tag.startswith(INJECTIVE)


def is_broadcast(tag: str) -> bool:
    return tag in (ELEMWISE, BROADCAST)
