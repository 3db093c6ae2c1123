"""Checks on decoded records before they are used: which may win best selection
(:func:`usable_cost`, :func:`usable_records`), whether a record's config fits a task's space
(:func:`check_config`) and whether its workload is small enough to re-create
(:func:`args_within_bounds`).

Separate from decoding (``record_codec.py``): a record that decodes may still be unusable, and
the auto-scheduler's log reader applies the same cost rule to its own format.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from typing import Any

from templtune.autotvm.record_codec import _is_number

# NOTE: one logger name for every part of the record module, as before it was split.
logger = logging.getLogger("autotvm.record")

__all__ = ["usable_cost", "usable_records", "check_config", "args_within_bounds"]


def usable_cost(res: Any) -> float | None:
    """The mean cost of a record that may win best selection, else None.

    Only a successful record (``error_no == 0``) whose costs are all finite and positive
    qualifies: a NaN, infinite, zero or negative cost is nonsense a log must not be able to
    make "best".
    """
    err = getattr(res, "error_no", None)
    if isinstance(err, bool) or not isinstance(err, int) or int(err) != 0:
        return None
    costs = tuple(getattr(res, "costs", ()) or ())
    if not costs or not all(_is_number(c) and math.isfinite(c) and c > 0 for c in costs):
        return None
    return float(sum(costs) / len(costs))


def usable_records(pairs: Iterable[tuple[Any, Any]], include_emulated: bool | None = None
                   ) -> Iterator[tuple[Any, Any, float]]:
    """``(input, result, mean cost)`` of each record of ``pairs`` that may compete for best
    (see :func:`usable_cost`). Records timed on the CPU CUDA emulator count only where
    ``use_emulated_records(include_emulated)`` allows (decided at the first one, which probes
    CUDA); those left out are counted in one warning once ``pairs`` is exhausted."""
    skipped = 0
    use_emulated: bool | None = None
    for inp, res in pairs:
        cost = usable_cost(res)
        if cost is None:
            continue
        if getattr(res, "device", "") == "emulator":
            if use_emulated is None:
                from templtune.runtime.cuda.backend import use_emulated_records

                use_emulated = use_emulated_records(include_emulated)
            if not use_emulated:
                skipped += 1
                continue
        yield inp, res, cost
    if skipped:
        logger.warning("ignored %d records timed on the CPU CUDA emulator (CPU timings; "
                       "include_emulated=True uses them)", skipped)


def check_config(space: Any, config: Any) -> str | None:
    """Why ``config`` (from a record) cannot be used with the task's ``space``, or None.

    Every knob of the space must be present with an entity of the same kind that the knob
    could have produced (a split whose factors multiply to the axis, a choice the knob offers);
    a record that fails this would otherwise reach the user's build as a KeyError or a wrong
    loop nest.
    """
    ents = getattr(config, "_entity_map", None)
    if ents is None:
        return f"{type(config).__name__} has no knobs"
    for name, knob in getattr(space, "space_map", {}).items():
        ent = ents.get(name)
        if ent is None:
            return f"knob {name!r} is missing"
        options = list(knob.entities)
        if not options:
            return f"knob {name!r} has no choices in the space"
        if type(ent) is not type(options[0]):
            return (f"knob {name!r} has kind {getattr(ent, 'kind', '?')!r}, the space's is "
                    f"{options[0].kind!r}")
        if ent not in options:
            return f"knob {name!r} = {ent!r} is not a choice of the space ({knob!r})"
    return None


#: Bounds on the arguments of a logged workload that readers may re-create (run its template
#: on): config-space construction costs about the square root of an axis length per axis, so
#: a log naming an axis of 10^18 must not get its template run.
MAX_ARG_INT = 1 << 24
MAX_ARG_INTS = 64


def args_within_bounds(args: Any) -> bool:
    """Whether a logged workload's arguments are small enough to re-create its task from
    (at most :data:`MAX_ARG_INTS` numbers, each at most :data:`MAX_ARG_INT` in magnitude)."""
    ints: list[int | float] = []

    def walk(x: Any) -> bool:
        if isinstance(x, (list, tuple)):
            return all(walk(a) for a in x)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            ints.append(x)  # a float may become a dimension too
            return abs(x) <= MAX_ARG_INT and len(ints) <= MAX_ARG_INTS
        return True

    return walk(args)
