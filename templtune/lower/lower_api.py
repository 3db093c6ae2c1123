"""``templtune.lower(s, args)``: schedule -> verified loop-IR :class:`PrimFunc`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from templtune.errors import LoweringError
from templtune.lower.double_buffer import check_attached, inject_double_buffer
from templtune.lower.ir import PrimFunc
from templtune.lower.nest import build_nest
from templtune.lower.partition import partition_loops
from templtune.lower.passes import unroll_loops
from templtune.lower.prefetch import inject_prefetch
from templtune.lower.vectorize import vectorize_loops
from templtune.lower.verify import verify
from templtune.schedule.bound import infer_bound
from templtune.schedule.schedule import Schedule
from templtune.te.tensor import Tensor

logger = logging.getLogger("templtune.lower")


def lower(s: Schedule, args: Sequence[Any], name: str = "main",
          simple_mode: bool = True) -> PrimFunc:
    """Lower a schedule to a loop-IR function.

    Parameters
    ----------
    s : Schedule
        The schedule (``te.create_schedule``) with its primitives applied.
    args : list of Tensor
        Function parameters in call order: every placeholder read plus the outputs. Tensors
        replaced by ``cache_write`` / ``rfactor`` may be given as the user created them.
    name : str
        Function name (``global_symbol``).
    simple_mode : bool
        Accepted for TVM compatibility; the printout is always the simple form.

    Returns
    -------
    PrimFunc
        Body after bound inference, loop-nest generation, storage flattening, index
        simplification, double buffering, prefetches, vectorization and unrolling; checked by
        :func:`verify`.

    Raises
    ------
    LoweringError
        When the schedule cannot be lowered (the message names the stage) or the result fails
        verification.
    """
    del simple_mode
    if not isinstance(s, Schedule):
        raise LoweringError(f"lower needs a Schedule, got {type(s).__name__}")
    tensors = []
    for a in args:
        if not isinstance(a, Tensor):
            raise LoweringError(f"lower: args must be tensors, got {type(a).__name__} {a!r}")
        tensors.append(s.resolve(a))
    # NOTE: only schedules that ask for it pay for the pass's walk over the whole nest
    double = any(st.double_buffered for st in s.stages)
    prefetch = any(a.prefetch for st in s.stages for a in st.iter_var_attrs.values())
    if double:
        check_attached(s.stages)
    br = infer_bound(s)
    params, body = build_nest(s, tensors, br, [a.name for a in args])
    if double:
        body = inject_double_buffer(body, br.var_ranges)
    if prefetch:
        body = inject_prefetch(body, br.var_ranges)
    body = partition_loops(body, br.var_ranges)
    body = vectorize_loops(body)
    body = unroll_loops(body, ranges=br.var_ranges)
    func = PrimFunc(name, tuple(params), body,
                    (("global_symbol", name), ("tir.noalias", True)))
    verify(func)
    return func

