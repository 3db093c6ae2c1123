"""``layout_transform``: re-lay a tensor from one layout string to another (Relay's op of the
name), as :class:`templtune.graph.convert_layout.ConvertLayout` inserts at a converted region's
edges. Layouts here are permutations of the same axis letters (``"NCHW"`` -> ``"NHWC"``,
``"OIHW"`` -> ``"HWIO"``); blocked layouts (``NCHW16c``) are not supported by this op."""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import topi

from ..ir import TensorType
from ..op import INJECTIVE, register_op


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
    axes = layout_axes(a["src_layout"], a["dst_layout"])
    if len(axes) != len(t[0].shape):
        raise ValueError(f"layout {a['src_layout']!r} has {len(axes)} axes, the tensor "
                         f"{len(t[0].shape)}")
    return tuple(t[0].shape[k] for k in axes)


register_op("layout_transform", INJECTIVE, _infer,
            lambda x, a: topi.transpose(x[0], layout_axes(a["src_layout"], a["dst_layout"])),
            lambda x, a: np.ascontiguousarray(
                x[0].transpose(layout_axes(a["src_layout"], a["dst_layout"]))))
