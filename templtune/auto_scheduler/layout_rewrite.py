"""Layout rewrite of constant (layout-free) placeholders for CPU targets.

A compute marks its constant inputs (weights) with the attribute
``layout_free_placeholders`` (a list of placeholder tensors, TVM's name). When a state tiles the
stage that reads such a tensor, the tensor's new layout follows the tiles: its dimensions are
the pieces of the tiled stage's iterators that index the tensor, in the stage's loop order
(extent-1 pieces dropped). The innermost (usually vectorized) tile then reads contiguous memory,
which is what the x86 templates get by packing their weights.

templtune implements ``LayoutRewriteOption.INSERT_TRANSFORM_STAGE`` (TVM's default for a
stand-alone llvm task): the kernel keeps its signature and computes what numpy computes; a
transform stage ``<weight>.layout`` inside the kernel writes the re-laid weight, and the tiled
stage reads it. The measured time includes that transform, as the x86 templates include their
in-kernel weight packing. A graph compiler pre-transforms the constant once instead
(``REWRITE_FOR_PRE_TRANSFORMED``): the kernel then reads a ``<weight>.layout`` placeholder of
the new shape, and :meth:`RewrittenLayout.transform` makes its value in numpy;
:func:`rewritten_layouts` says which tensors a state rewrites and how.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.te.expr import IterKind, IterVar, TensorLoad, Var, const, const_int
from templtune.te.functor import Mutator, handles
from templtune.te.tensor import ComputeOp, PlaceholderOp, Tensor

logger = logging.getLogger("auto_scheduler.layout_rewrite")

#: the compute attribute naming the placeholders whose layout may be rewritten (TVM's name)
LAYOUT_FREE_ATTR = "layout_free_placeholders"
#: layout rewrite options (TVM's LayoutRewriteOption values)
NO_REWRITE, INSERT_TRANSFORM_STAGE, REWRITE_FOR_PRE_TRANSFORMED = 0, 1, 2


class LayoutRewriteOption(enum.IntEnum):
    """TVM's ``auto_scheduler.LayoutRewriteOption`` (its values are the plain ints above)."""

    NO_REWRITE = NO_REWRITE
    INSERT_TRANSFORM_STAGE = INSERT_TRANSFORM_STAGE
    REWRITE_FOR_PRE_TRANSFORMED = REWRITE_FOR_PRE_TRANSFORMED

    @staticmethod
    def get_target_default(target: Any, in_relay_integration: bool = False
                           ) -> LayoutRewriteOption:
        """The default for ``target``, as TVM: CPU (``llvm``) targets rewrite layouts
        (pre-transformed weights inside network compilation, a transform stage otherwise);
        GPU targets do not. (TVM's Mali rule has no counterpart: templtune has no OpenCL
        backend, and a target kind it does not know raises ``TargetError``.)"""
        from templtune.target import Target

        t = target if isinstance(target, Target) else Target(str(target))
        if not t.capabilities.is_gpu:
            return (LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED if in_relay_integration
                    else LayoutRewriteOption.INSERT_TRANSFORM_STAGE)
        return LayoutRewriteOption.NO_REWRITE


@dataclass(frozen=True, slots=True)
class LayoutDim:
    """One dimension of a rewritten layout: digit ``(x // stride) % extent`` of original
    dimension ``dim`` (index ``x``)."""

    dim: int
    stride: int
    extent: int


@dataclass(frozen=True, slots=True)
class RewrittenLayout:
    """The new layout of placeholder ``name`` (original shape ``orig_shape``)."""

    name: str
    orig_shape: tuple[int, ...]
    dims: tuple[LayoutDim, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.extent for d in self.dims)

    def transform(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` (original layout) re-laid into this layout (a contiguous copy)."""
        if tuple(arr.shape) != self.orig_shape:
            raise ValueError(f"layout of {self.name}: expected shape {self.orig_shape}, got "
                             f"{tuple(arr.shape)}")
        # NOTE: each original dimension is a mixed-radix number of its pieces (largest stride
        # first); reshape into all pieces, then transpose into the layout's order.
        pieces: list[tuple[int, int]] = []  # (dim, index into self.dims or -1)
        shape: list[int] = []
        for d, n in enumerate(self.orig_shape):
            mine = sorted((k for k, ld in enumerate(self.dims) if ld.dim == d),
                          key=lambda k: -self.dims[k].stride)
            if not mine:
                pieces.append((d, -1))
                shape.append(n)
                continue
            for k in mine:
                pieces.append((d, k))
                shape.append(self.dims[k].extent)
        view = arr.reshape(shape)
        order = [next(p for p, (_, k) in enumerate(pieces) if k == j)
                 for j in range(len(self.dims))]
        rest = [p for p, (_, k) in enumerate(pieces) if k == -1]
        return np.ascontiguousarray(view.transpose(order + rest).reshape(self.shape))


def _const(iv: IterVar) -> int | None:
    return getattr(getattr(iv.dom, "extent", None), "value", None) if iv.dom else None


def _leaf_pieces(stage: Any) -> list[tuple[IterVar, int, int]] | None:
    """``(root axis, stride, extent)`` of every leaf of ``stage`` in loop order (a fused leaf
    expands into its parts); None when a split does not divide its axis exactly."""
    from templtune.schedule.relations import Fuse, Rebase, Split

    info: dict[int, list[tuple[IterVar, int, int]]] = {}
    for iv in list(stage.op.axis) + list(stage.op.reduce_axis):
        ext = _const(iv)
        if ext is None:
            return None
        info[id(iv)] = [(iv, 1, ext)]
    for rel in stage.relations:
        if isinstance(rel, Split):
            parent = info.get(id(rel.parent))
            if parent is None or len(parent) != 1:
                return None
            root, stride, ext = parent[0]
            f = rel.factor if rel.factor is not None else (
                ext // rel.nparts if rel.nparts and ext % rel.nparts == 0 else None)
            if not f or ext % f:
                return None
            info[id(rel.inner)] = [(root, stride, f)]
            info[id(rel.outer)] = [(root, stride * f, ext // f)]
        elif isinstance(rel, Fuse):
            if id(rel.outer) not in info or id(rel.inner) not in info:
                return None
            info[id(rel.fused)] = info[id(rel.outer)] + info[id(rel.inner)]
        elif isinstance(rel, Rebase):
            if id(rel.parent) not in info:
                return None
            info[id(rel.rebased)] = info[id(rel.parent)]
    out: list[tuple[IterVar, int, int]] = []
    for lv in stage.leaf_iter_vars:
        if id(lv) not in info:
            return None
        out += info[id(lv)]
    return out


def _loads_of(op: ComputeOp, t: Tensor) -> list[TensorLoad]:
    from templtune.te.functor import post_order

    return [n for b in op.body for n in post_order(b)
            if isinstance(n, TensorLoad) and n.tensor is t]


def _layout_free(dag: Any) -> list[Tensor]:
    out: list[Tensor] = []
    for op in dag.ops:
        if isinstance(op, ComputeOp):
            for t in dict(op.attrs).get(LAYOUT_FREE_ATTR, ()) or ():
                if isinstance(t, Tensor) and isinstance(t.op, PlaceholderOp) and t not in out:
                    out.append(t)
    return out


def _plan(sch: Any, t: Tensor) -> tuple[Any, RewrittenLayout] | None:
    """(reader stage, layout) for placeholder ``t`` in a replayed schedule, or None."""
    readers = sch._readers(t)
    if len(readers) != 1:
        return None
    st = readers[0]
    if st.attach_type == "inline" or not isinstance(st.op, ComputeOp):
        return None
    loads = _loads_of(st.op, t)
    if not loads:
        return None
    idx = loads[0].indices
    if any(tuple(ld.indices) != tuple(idx) for ld in loads[1:]):
        return None
    roots = {id(iv.var): iv for iv in list(st.op.axis) + list(st.op.reduce_axis)}
    dim_of: dict[int, int] = {}
    for d, e in enumerate(idx):
        if not isinstance(e, Var) or id(e) not in roots or id(e) in dim_of:
            return None
        dim_of[id(e)] = d
    pieces = _leaf_pieces(st)
    if pieces is None:
        return None
    consts = [const_int(s) for s in t.shape]
    if any(x is None for x in consts):
        return None  # a symbolic shape cannot be re-laid
    shape = tuple(int(x) for x in consts if x is not None)
    dims = tuple(LayoutDim(dim_of[id(root.var)], stride, ext) for root, stride, ext in pieces
                 if id(root.var) in dim_of and ext > 1)
    if not dims or [d.dim for d in dims] == sorted(d.dim for d in dims) and all(
            sum(1 for x in dims if x.dim == d.dim) == 1 for d in dims):
        return None  # the original layout already (nothing to gain)
    return st, RewrittenLayout(t.name, shape, dims)


class _Redirect(Mutator):
    def __init__(self, src: Tensor, dst: Tensor, layout: RewrittenLayout) -> None:
        self.src, self.dst, self.layout = src, dst, layout

    @handles(TensorLoad)
    def visit_TensorLoad(self, node: TensorLoad) -> Any:
        if node.tensor is not self.src:
            return self.generic(node)
        out = []
        for ld in self.layout.dims:
            e = node.indices[ld.dim]
            if ld.stride > 1:
                e = e // ld.stride
            if ld.stride * ld.extent < self.layout.orig_shape[ld.dim]:
                e = e % ld.extent
            out.append(e)
        return TensorLoad(self.dst, tuple(out))


def rewritten_layouts(dag: Any, sch: Any) -> list[tuple[Any, Tensor, RewrittenLayout]]:
    """``(reader stage, placeholder, layout)`` for each layout-free placeholder of ``dag`` that
    the replayed schedule ``sch`` tiles."""
    out = []
    for t in _layout_free(dag):
        found = _plan(sch, t)
        if found is not None:
            out.append((found[0], t, found[1]))
    return out


#: shortest run of consecutive source elements worth reading in the innermost copy loop
MIN_SOURCE_RUN = 8


def copy_order(lay: RewrittenLayout, min_run: int = MIN_SOURCE_RUN) -> list[int]:
    """Loop order (indices into ``lay.dims``) of the stage that copies a tensor into ``lay``.

    Layout order (sequential writes), except that the piece of the source's contiguous
    dimension with stride 1 moves innermost when it is at least ``min_run`` long, so that the
    innermost loop reads consecutive elements. In layout order that loop would read one element
    per source row, and with a power-of-two row pitch those rows share a cache set. A short
    piece (a 3x3 conv kernel's width) stays put: a 3-trip inner loop costs more than it saves.
    """
    last = len(lay.orig_shape) - 1
    order = list(range(len(lay.dims)))
    run = [i for i, ld in enumerate(lay.dims) if ld.dim == last and ld.stride == 1]
    if run and lay.dims[run[0]].extent >= min_run and run[0] != order[-1]:
        order.remove(run[0])
        order.append(run[0])
    return order


def rewrite_layout(dag: Any, sch: Any, pre_transformed: bool = False
                   ) -> list[tuple[Tensor, Tensor, RewrittenLayout]]:
    """Re-lay each layout-free placeholder tiled in ``sch`` (in place).

    INSERT_TRANSFORM_STAGE (default): a transform stage inside the kernel writes the re-laid
    weight, and the kernel keeps its arguments. ``pre_transformed`` (REWRITE_FOR_PRE_TRANSFORMED,
    what a network compiler wants for constant weights): the tiled stage reads a new placeholder
    ``<name>.layout`` of the new shape, which replaces the original among the kernel's
    arguments; :meth:`RewrittenLayout.transform` makes its value once, in numpy.

    Returns ``(original placeholder, tensor read instead, layout)`` for each rewrite."""
    from templtune.schedule.relations import new_iter_var
    from templtune.schedule.stage import Stage
    from templtune.te.operation import placeholder

    done = []
    for reader, t, lay in rewritten_layouts(dag, sch):
        if pre_transformed:
            new = placeholder(lay.shape, dtype=t.dtype, name=f"{t.name}.layout")
            body = tuple(_Redirect(t, new, lay).visit(b) for b in reader.op.body)
            sch._replace_op(reader, dataclasses.replace(reader.op, body=body))
            sch._insert(Stage(new.op, sch), sch.stages.index(sch[t]) + 1)
            done.append((t, new, lay))
            continue
        axes = tuple(new_iter_var(f"ax{i}", n, IterKind.DATA_PAR)
                     for i, n in enumerate(lay.shape))
        orig = []
        for d in range(len(lay.orig_shape)):
            e: Any = const(0)
            for ld, ax in zip(lay.dims, axes):
                if ld.dim == d:
                    e = e + ax.var * ld.stride
            orig.append(e)
        op = ComputeOp(f"{t.name}.layout", "", (), axes, (), (TensorLoad(t, tuple(orig)),))
        new = op.output(0)
        body = tuple(_Redirect(t, new, lay).visit(b) for b in reader.op.body)
        sch._replace_op(reader, dataclasses.replace(reader.op, body=body))
        st = Stage(op, sch)
        sch._insert(st, sch.stages.index(sch[t]) + 1)
        order = copy_order(lay)
        if order != list(range(len(axes))):
            st.reorder(*(st.leaf_iter_vars[i] for i in order))
        if axes and lay.shape[order[0]] > 1:
            st.parallel(st.leaf_iter_vars[0])
        done.append((t, new, lay))
        logger.debug("layout of %s: %s -> %s", t.name, lay.orig_shape, lay.shape)
    return done


__all__ = ["LAYOUT_FREE_ATTR", "LayoutDim", "RewrittenLayout", "copy_order", "rewrite_layout",
           "rewritten_layouts", "NO_REWRITE", "INSERT_TRANSFORM_STAGE",
           "REWRITE_FOR_PRE_TRANSFORMED"]
