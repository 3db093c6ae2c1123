"""Checking the arguments of a call to a compiled :class:`~.module.Module` against its
parameters: count, dtype, rank, static and symbolic shapes, layout and writability."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.codegen.llvm.render import ParamInfo
from templtune.errors import RuntimeCallError


def _unwrap(x: Any) -> Any:
    return x._array if hasattr(x, "_array") and hasattr(x, "numpy") else x


def check_arguments(entry_name: str, params: Sequence[ParamInfo],
                    shape_vars: Sequence[tuple[str, str]], arrays: tuple[Any, ...]
                    ) -> tuple[list[np.ndarray], list[int]]:
    """The numpy arrays behind ``arrays`` and the values of ``shape_vars`` they bind; raises
    :class:`RuntimeCallError` when an argument does not fit its parameter."""
    if len(arrays) != len(params):
        raise RuntimeCallError(
            f"{entry_name} expects {len(params)} arguments "
            f"({', '.join(p.name for p in params)}), got {len(arrays)}")
    out: list[np.ndarray] = []
    bound: dict[str, int] = {}
    where: dict[str, tuple[int, str, int]] = {}  # which argument bound each shape variable
    for i, (a, p) in enumerate(zip(arrays, params)):
        a = _unwrap(a)
        if not isinstance(a, np.ndarray):
            raise RuntimeCallError(f"argument {i} ({p.name}) of {entry_name} must be a "
                                   f"numpy array, got {type(a).__name__}")
        if a.dtype != dt.to_numpy(p.dtype):
            raise RuntimeCallError(f"argument {i} ({p.name}) of {entry_name} has dtype "
                                   f"{a.dtype}, expected {p.dtype}")
        if a.ndim != len(p.shape):
            raise RuntimeCallError(f"argument {i} ({p.name}) of {entry_name} has shape "
                                   f"{a.shape}, expected {len(p.shape)} dimensions {p.shape}")
        for ax, (got, want) in enumerate(zip(a.shape, p.shape)):
            if isinstance(want, int):
                ok = got == want
            elif isinstance(want, str):
                ok = bound.setdefault(want, got) == got
                if ok:
                    where.setdefault(want, (i, p.name, ax))
                else:
                    j, other, ax0 = where[want]
                    if j == i:
                        raise RuntimeCallError(
                            f"argument {i} ({p.name}) of {entry_name} has shape "
                            f"{a.shape}, but its axes {ax0} and {ax} are both {want}")
                    raise RuntimeCallError(
                        f"arguments {j} ({other}) and {i} ({p.name}) of {entry_name} "
                        f"disagree on {want}: {other}.shape[{ax0}] = {bound[want]} but "
                        f"{p.name}.shape[{ax}] = {got}")
            else:
                ok = True
            if not ok:
                raise RuntimeCallError(
                    f"argument {i} ({p.name}) of {entry_name} has shape {a.shape}, "
                    f"expected {tuple(p.shape)} (mismatch on axis {ax})")
        if not a.flags.c_contiguous:
            raise RuntimeCallError(f"argument {i} ({p.name}) of {entry_name} is not "
                                   "C-contiguous (use np.ascontiguousarray)")
        if not a.flags.writeable:
            raise RuntimeCallError(f"argument {i} ({p.name}) of {entry_name} is read-only")
        out.append(a)
    for n, d in shape_vars:
        if d == "int32" and bound[n] > 2**31 - 1:
            raise RuntimeCallError(f"{entry_name}: {n} = {bound[n]} does not fit its "
                                   f"dtype int32 (declare it with te.var({n!r}, 'int64'))")
    return out, [bound[n] for n, _ in shape_vars]
