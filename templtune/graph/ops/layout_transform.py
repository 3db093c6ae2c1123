"""``layout_transform``: re-lay a tensor from one layout string to another (Relay's op of the
name). Two kinds: permutations of the same axis letters (``"NCHW"`` -> ``"NHWC"``, ``"OIHW"``
-> ``"HWIO"``), as :class:`templtune.graph.convert_layout.ConvertLayout` inserts at a converted
region's edges, and NCHW <-> NCHW[x]c blockings (:mod:`.nchwc`), as ``AlterOpLayout`` inserts
where two blockings meet."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from templtune import topi

from ..ir import TensorType
from ..op import INJECTIVE, register_op
from .nchwc import _lt_compute, _lt_infer, transform_array

_BLOCKED = re.compile(r"NCHW\d+c")


def _is_blocking(a: dict[str, Any]) -> bool:
    """Whether the transform changes a channel blocking (NCHW[x]c on either side)."""
    return any(_BLOCKED.fullmatch(a[k]) for k in ("src_layout", "dst_layout"))


def layout_axes(src: str, dst: str) -> tuple[int, ...]:
    """The ``transpose`` axes that take a ``src``-laid tensor to ``dst``.

    Raises
    ------
    ValueError
        If the layouts are not permutations of the same distinct, upper-case axis letters.
    """
    if (len(set(src)) != len(src) or sorted(src) != sorted(dst) or not src.isalpha()
            or not src.isupper()):
        raise ValueError(f"layout_transform from {src!r} to {dst!r}: only permutations of the "
                         f"same axes are supported (no blocked layouts such as NCHW16c)")
    return tuple(src.index(ch) for ch in dst)


def _infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    if _is_blocking(a):
        return _lt_infer(t, a)
    axes = layout_axes(a["src_layout"], a["dst_layout"])
    if len(axes) != len(t[0].shape):
        raise ValueError(f"layout {a['src_layout']!r} has {len(axes)} axes, the tensor "
                         f"{len(t[0].shape)}")
    return tuple(t[0].shape[k] for k in axes)


def _compute(x: list[Any], a: dict[str, Any]) -> Any:
    if _is_blocking(a):
        return _lt_compute(x, a)
    return topi.transpose(x[0], layout_axes(a["src_layout"], a["dst_layout"]))


def _reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    if _is_blocking(a):
        return transform_array(x[0], a["src_layout"], a["dst_layout"], a.get("channels", 0))
    return np.ascontiguousarray(x[0].transpose(layout_axes(a["src_layout"], a["dst_layout"])))


register_op("layout_transform", INJECTIVE, _infer, _compute, _reference)
