"""A schedule stage: the loop structure and placement of one operation.

Primitives follow TVM's ``te.Stage``. Every illegal request raises
:class:`~templtune.errors.ScheduleError` naming the stage and the axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from templtune.errors import ScheduleError
from templtune.schedule.relations import (
    Fuse,
    IterVarAttr,
    Relation,
    Split,
    new_iter_var,
)
from templtune.te.expr import IterKind, IterVar, const_int
from templtune.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor

if TYPE_CHECKING:
    from templtune.schedule.schedule import Schedule

_THREAD_TAGS = ("blockIdx.", "threadIdx.", "vthread", "cthread")


def _extent(iv: IterVar) -> int | None:
    return None if iv.dom is None else const_int(iv.dom.extent)


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


class Stage:
    """One operation's loop nest in a :class:`~templtune.schedule.schedule.Schedule`.

    Attributes
    ----------
    op : Operation
        The current operation (cache_write / rfactor may replace it).
    origin_op : Operation
        The operation the stage was created for.
    all_iter_vars, leaf_iter_vars : list[IterVar]
        Every axis ever created in the stage / the loop axes, outermost first.
    relations : list[Split | Fuse | Rebase]
        How leaves derive from the root axes.
    attach_type : str
        ``"root"``, ``"inline"`` or ``"scope"`` (after ``compute_at``).
    attach_stage, attach_ivar : Stage, IterVar
        The compute_at target.
    iter_var_attrs : dict[IterVar, IterVarAttr]
        Loop kind, thread binding and pragmas per leaf axis.
    scope : str
        Storage scope of the stage's output ("global", "shared", "local"; "" infers it).
    """

    def __init__(self, op: Operation, schedule: Schedule | None = None) -> None:
        self.op: Operation = op
        self.origin_op: Operation = op
        self.schedule = schedule
        root = list(op.axis) + list(op.reduce_axis) if isinstance(op, ComputeOp) else []
        self.all_iter_vars: list[IterVar] = list(root)
        self.leaf_iter_vars: list[IterVar] = list(root)
        self.relations: list[Relation] = []
        self.attach_type = "root"
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.iter_var_attrs: dict[IterVar, IterVarAttr] = {}
        # NOTE: "" means "infer": global at the root, else from the thread loops around the
        # attach point (under threadIdx/vthread: local, under blockIdx only: shared), as TVM.
        self.scope = ""
        self.is_output = False
        self.storage_aligns: list[tuple[IterVar, int, int]] = []
        # NOTE: set by rfactor on the stage that reduces the partial results; only such a stage
        # may bind a reduction axis to a thread (a cross-thread reduction).
        self.allow_reduce_bind = False
        self.double_buffered = False
        self.group: Any = None  # the StageGroup (create_group) this stage belongs to

    # ------------------------------------------------------------------------------ helpers

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    def __repr__(self) -> str:
        return f"stage({self.op.name}, {type(self.op).__name__})"

    def _err(self, msg: str, iv: Any = None) -> ScheduleError:
        axis = "" if iv is None else f", axis {_ivname(iv)}"
        return ScheduleError(f"stage {self.op.name}{axis}: {msg}")

    def _iv(self, iv: Any) -> IterVar:
        if not isinstance(iv, IterVar):
            raise self._err(f"expected an IterVar, got {type(iv).__name__} {iv!r}")
        return iv

    def _leaf_pos(self, iv: Any, what: str) -> int:
        iv = self._iv(iv)
        for i, x in enumerate(self.leaf_iter_vars):
            if x is iv:
                return i
        if any(x is iv for x in self.all_iter_vars):
            raise self._err(f"cannot {what}: the axis was already split or fused "
                            f"(it is not a leaf axis any more)", iv)
        raise self._err(f"cannot {what}: the axis does not belong to this stage", iv)

    def _attr(self, iv: IterVar) -> IterVarAttr:
        a = self.iter_var_attrs.get(iv)
        if a is None:
            a = self.iter_var_attrs[iv] = IterVarAttr()
        return a

    def _check_compute(self, what: str) -> None:
        if not isinstance(self.op, ComputeOp):
            raise self._err(f"cannot {what} a placeholder")

    # --------------------------------------------------------------------------- primitives

    def split(self, parent: IterVar, factor: int | None = None,
              nparts: int | None = None) -> tuple[IterVar, IterVar]:
        """Split ``parent`` into ``(outer, inner)``; exactly one of ``factor`` / ``nparts``.
        A factor that does not divide the extent is legal: the tail is guarded."""
        self._check_compute("split")
        pos = self._leaf_pos(parent, "split")
        if (factor is None) == (nparts is None):
            raise self._err("split needs exactly one of factor= or nparts=", parent)
        n = const_int(factor if factor is not None else nparts)
        if n is None or n < 1:
            raise self._err(f"split factor/nparts must be a positive int, got "
                            f"{factor if factor is not None else nparts!r}", parent)
        ext = _extent(parent)
        if factor is not None:
            o_ext = None if ext is None else _ceildiv(ext, n)
            i_ext: int | None = n
        else:
            o_ext = n
            i_ext = None if ext is None else _ceildiv(ext, n)
        name = parent.var.name
        kind = parent.iter_type if parent.iter_type is IterKind.REDUCE else IterKind.DATA_PAR
        outer = new_iter_var(f"{name}.outer", o_ext, kind)
        inner = new_iter_var(f"{name}.inner", i_ext, kind)
        self.relations.append(Split(parent, outer, inner, n if factor is not None else None,
                                    n if nparts is not None else None))
        self.all_iter_vars += [outer, inner]
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        return outer, inner

    def tile(self, x_parent: IterVar, y_parent: IterVar, x_factor: int,
             y_factor: int) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Split two axes and reorder to ``(xo, yo, xi, yi)``."""
        xo, xi = self.split(x_parent, x_factor)
        yo, yi = self.split(y_parent, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *args: IterVar) -> IterVar:
        """Fuse consecutive leaf axes (given outermost first) into one axis."""
        self._check_compute("fuse")
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        if not args:
            raise self._err("fuse needs at least one axis")
        if len(args) == 1:
            self._leaf_pos(args[0], "fuse")
            return args[0]
        fused = args[0]
        for inner in args[1:]:
            fused = self._fuse2(fused, inner)
        return fused

    def _fuse2(self, outer: IterVar, inner: IterVar) -> IterVar:
        po = self._leaf_pos(outer, "fuse")
        pi = self._leaf_pos(inner, "fuse")
        if pi != po + 1:
            raise self._err(f"cannot fuse non-adjacent axes {_ivname(outer)} and "
                            f"{_ivname(inner)} (leaf positions {po} and {pi}); reorder first",
                            inner)
        red_o, red_i = outer.iter_type is IterKind.REDUCE, inner.iter_type is IterKind.REDUCE
        if red_o != red_i:
            raise self._err(f"cannot fuse a reduction axis with a data-parallel axis "
                            f"({_ivname(outer)}, {_ivname(inner)})", inner)
        eo, ei = _extent(outer), _extent(inner)
        ext = None if eo is None or ei is None else eo * ei
        fused = new_iter_var(f"{outer.var.name}.{inner.var.name}.fused", ext,
                             IterKind.REDUCE if red_o else IterKind.DATA_PAR)
        self.relations.append(Fuse(outer, inner, fused))
        self.all_iter_vars.append(fused)
        self.leaf_iter_vars[po:pi + 1] = [fused]
        return fused

    def reorder(self, *args: IterVar) -> None:
        """Put the given leaf axes, in this order, into the positions they occupy."""
        self._check_compute("reorder")
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        pos = [self._leaf_pos(iv, "reorder") for iv in args]
        if len(set(pos)) != len(pos):
            raise self._err("reorder got the same axis twice",
                            next(a for a in args if sum(x is a for x in args) > 1))
        for p, iv in zip(sorted(pos), args):
            self.leaf_iter_vars[p] = iv

    def _annotate(self, iv: IterVar, kind: IterKind, what: str) -> None:
        self._check_compute(what)
        self._leaf_pos(iv, what)
        if iv.iter_type is IterKind.REDUCE and kind is not IterKind.UNROLLED:
            raise self._err(f"cannot {what} a reduction axis", iv)
        self._attr(iv).kind = kind

    def vectorize(self, iv: IterVar) -> None:
        """Vectorize the (innermost, constant-extent) axis."""
        self._annotate(iv, IterKind.VECTORIZED, "vectorize")

    def vectorize_reduction(self, iv: IterVar) -> None:
        """Vectorize a (innermost, constant-extent) reduction axis whose extent is a power of
        two: its lanes combine in a tree of log2(extent) shuffle steps, not one after another.
        A float sum so reassociates (as :meth:`Schedule.rfactor`'s partials do); where the body
        is no ``x = x op e`` update (op a sum, product, min or max) the loop stays serial.
        TVM has no such primitive (its ``vectorize`` refuses reduction axes, as ours does)."""
        self._check_compute("vectorize_reduction")
        self._leaf_pos(iv, "vectorize_reduction")
        if iv.iter_type is not IterKind.REDUCE:
            raise self._err("vectorize_reduction needs a reduction axis", iv)
        self._attr(iv).kind = IterKind.VECTORIZED

    def unroll(self, iv: IterVar) -> None:
        self._annotate(iv, IterKind.UNROLLED, "unroll")

    def parallel(self, iv: IterVar) -> None:
        self._annotate(iv, IterKind.PARALLELIZED, "parallel")

    def bind(self, iv: IterVar, thread_iv: IterVar) -> None:
        """Bind a leaf axis to a GPU thread axis made by ``te.thread_axis``."""
        self._check_compute("bind")
        self._leaf_pos(iv, "bind")
        if not isinstance(thread_iv, IterVar) or not thread_iv.thread_tag.startswith(_THREAD_TAGS):
            raise self._err(f"bind needs a thread axis (te.thread_axis), got {thread_iv!r}", iv)
        # NOTE: as TVM, a reduction axis may go to threadIdx.* directly (the CUDA backend
        # lowers it to a cross-thread all-reduce); blocks and virtual threads cannot reduce.
        if iv.iter_type is IterKind.REDUCE and not self.allow_reduce_bind \
                and not thread_iv.thread_tag.startswith("threadIdx"):
            raise self._err(f"cannot bind a reduction axis to {thread_iv.thread_tag} (only "
                            f"threadIdx.* axes can reduce across threads)", iv)
        for other, a in self.iter_var_attrs.items():
            if other is not iv and a.bind_thread is thread_iv:
                raise self._err(f"thread axis {thread_iv.thread_tag} is already bound to "
                                f"{_ivname(other)} in this stage", iv)
        self._attr(iv).bind_thread = thread_iv

    def pragma(self, iv: IterVar, pragma_type: str, pragma_value: Any = None) -> None:
        """Annotate a loop, e.g. ``pragma(ko, "auto_unroll_max_step", 16)`` or
        ``pragma(ko, "unroll_explicit", False)``."""
        self._check_compute("pragma")
        self._leaf_pos(iv, "pragma")
        if pragma_value is None:
            pragma_value = 1
        if isinstance(pragma_value, bool):
            pragma_value = int(pragma_value)
        value = const_int(pragma_value)
        if value is None:
            raise self._err(f"pragma {pragma_type!r} needs an int value, got {pragma_value!r}",
                            iv)
        self._attr(iv).pragmas.append((pragma_type, value))

    def prefetch(self, tensor: Any, var: IterVar, offset: int) -> None:
        """Prefetch, at the start of each iteration of loop ``var``, what iteration ``var +
        offset`` reads of ``tensor`` (TVM's ``Stage.prefetch``): lowering bounds the
        tensor's reads in the loop's body over its inner loops and emits one prefetch per
        cache line of that range. On x86 the lines go to L2 (``prefetcht1``), not L1, where
        an iteration's worth would evict what the current one reads; other targets ignore
        it. A prefetch past the tensor's end (the last iterations) is harmless."""
        self._check_compute("prefetch")
        self._leaf_pos(var, "prefetch")
        if not isinstance(tensor, Tensor):
            raise self._err(f"prefetch needs a tensor, got {type(tensor).__name__}", var)
        k = None if isinstance(offset, bool) else const_int(offset)
        if not k:
            raise self._err(f"prefetch needs a non-zero int offset, got {offset!r}", var)
        self._attr(var).prefetch.append((tensor, k))

    def storage_align(self, axis: IterVar, factor: int, offset: int) -> None:
        """Pad the stride of dimension ``axis`` so that ``stride % factor == offset``."""
        self._check_compute("storage_align")
        if not any(a is axis for a in self.op.axis):  # type: ignore[attr-defined]
            raise self._err("storage_align needs one of the op's data axes (op.axis)", axis)
        if int(factor) < 1 or not 0 <= int(offset) < int(factor):
            raise self._err(f"storage_align needs factor >= 1 and 0 <= offset < factor, got "
                            f"({factor}, {offset})", axis)
        self.storage_aligns.append((axis, int(factor), int(offset)))

    def set_scope(self, scope: str) -> None:
        self.scope = scope

    def double_buffer(self) -> None:
        """Double-buffer this stage's buffer, as TVM's: with the stage attached inside a loop
        ``ko`` (``compute_at``), lowering allocates the buffer twice, fills one half for
        ``ko = 0`` before the loop and, in iteration ``ko``, prefetches iteration ``ko + 1``
        into the other half while the consumer reads half ``ko % 2``; on CUDA one barrier per
        iteration remains. Lowering raises :class:`~templtune.errors.LoweringError` when the
        stage is not attached inside a serial loop (see
        :func:`templtune.lower.double_buffer.inject_double_buffer`)."""
        self._check_compute("double_buffer")
        if self.is_output:
            raise self._err("cannot double_buffer an output stage")
        self.double_buffered = True

    # ------------------------------------------------------------------------- placement

    def compute_at(self, parent: Stage, iv: IterVar) -> None:
        """Compute this stage inside loop ``iv`` of ``parent`` (a consumer of this stage)."""
        self._check_compute("compute_at")
        if not isinstance(parent, Stage):
            raise self._err(f"compute_at needs a Stage (s[T]), got {type(parent).__name__}")
        if parent is self:
            raise self._err("cannot compute_at a stage inside itself", iv)
        parent._leaf_pos(iv, "compute_at")
        sch = self.schedule
        if sch is not None and not sch._is_consumer(parent, self):
            raise self._err(f"cannot compute_at stage {parent.op.name}: it does not read "
                            f"{self.op.name} (directly or through other stages)", iv)
        if self.is_output:
            raise self._err("cannot compute_at an output stage", iv)
        self.attach_type = "scope"
        self.attach_stage = parent
        self.attach_ivar = iv

    def compute_inline(self) -> None:
        """Substitute this stage's body into its consumers."""
        self._check_compute("compute_inline")
        if self.is_output:
            raise self._err("cannot inline an output stage")
        op = self.op
        assert isinstance(op, ComputeOp)
        if op.reduce_axis:
            raise self._err(f"cannot inline a reduction stage (reduces over "
                            f"{', '.join(_ivname(r) for r in op.reduce_axis)})")
        self.attach_type = "inline"
        self.attach_stage = self.attach_ivar = None

    def compute_root(self) -> None:
        """Compute this stage at the top level (undoes compute_at / compute_inline)."""
        self._check_compute("compute_root")
        self.attach_type = "root"
        self.attach_stage = self.attach_ivar = None


def _ivname(iv: Any) -> str:
    return iv.var.name if isinstance(iv, IterVar) else repr(iv)
