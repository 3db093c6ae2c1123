"""Loads, stores and guarded selects of the LLVM renderer (a mixin over the expression half).

Guarded selects (``if_then_else``) live here because what makes them hard is memory: the branch
not taken may hold loads that would fault. See :meth:`MemoryRenderer._guarded_select`.
"""

from __future__ import annotations

import dataclasses

from templtune import dtype as dt
from templtune.codegen.llvm import types as T
from templtune.codegen.llvm.exprs import ExprRenderer, V
from templtune.errors import CodegenError
from templtune.lower.ir import Buffer, Load, Ramp
from templtune.te.dispatch import handles
from templtune.te.expr import BinOp, BinOpKind, IntImm, PrimExpr, Select, const

_EXPR_FIELDS: dict[type, tuple[str, ...]] = {}


def _walk(e: PrimExpr) -> list[PrimExpr]:
    """All expression nodes under ``e`` (a fast walk over expression-valued fields only)."""
    out: list[PrimExpr] = []
    stack = [e]
    while stack:
        n = stack.pop()
        out.append(n)
        cls = type(n)
        names = _EXPR_FIELDS.get(cls)
        if names is None:
            names = tuple(f.name for f in dataclasses.fields(n)  # type: ignore[arg-type]
                          if f.name not in ("dtype", "buffer", "name", "lanes", "op",
                                            "guarded", "value_index"))
            _EXPR_FIELDS[cls] = names
        for name in names:
            v = getattr(n, name)
            if isinstance(v, PrimExpr):
                stack.append(v)
            elif isinstance(v, tuple):
                stack.extend(x for x in v if isinstance(x, PrimExpr))
    return out


def _uniform(e: PrimExpr) -> bool:
    """True when every lane of ``e`` has the same value: its vectors are broadcasts (no ramp,
    no vector load)."""
    return not any(isinstance(n, Ramp) or (isinstance(n, Load) and dt.lanes(n.dtype) > 1)
                   for n in _walk(e))


def _loads(e: PrimExpr) -> bool:
    """True when ``e`` reads memory."""
    return any(isinstance(n, Load) for n in _walk(e))


def _clampable(e: PrimExpr, uniform: bool = False) -> bool:
    """True when ``e`` can be evaluated speculatively once its load indices are clamped: its
    loads read buffers with enough constant elements for index 0 (or a vector at 0), and it
    has no integer division by a non-constant divisor. A load with its own lane mask (a
    window, ``lower.vectorize``) qualifies only under a ``uniform`` guard: a lane-wise one
    masks by output lane, and a window's lanes are not the output's."""
    for n in _walk(e):
        if isinstance(n, Load):
            size = n.buffer.const_size
            if size is None or size < dt.lanes(n.index.dtype) or (
                    n.predicate is not None and not uniform):
                return False
        elif isinstance(n, BinOp) and n.op in (BinOpKind.DIV, BinOpKind.FLOORDIV,
                                               BinOpKind.FLOORMOD):
            if not dt.is_float(n.dtype) and not isinstance(n.b, IntImm):
                return False
        elif isinstance(n, Select) and n.guarded and not (
                _clampable(n.true_value, uniform) and _clampable(n.false_value, uniform)):
            return False
    return True



class MemoryRenderer(ExprRenderer):
    """Adds memory access and guarded selects to :class:`ExprRenderer`."""

    #: rendering the branches of a select tree on a uniform condition (see expr_Select)
    _in_tree = False

    @handles(Select, table="expr")
    def expr_Select(self, e: Select) -> V:
        lanes = dt.lanes(e.dtype)
        cond_lanes = dt.lanes(e.cond.dtype)
        if e.guarded:
            if cond_lanes == 1:
                return self._guarded_select(e)
            if not (_uniform(e.cond) and all(_loads(v) for v in (e.true_value, e.false_value))):
                return self._guarded_vector_select(e)
            vc = self.cast_to(self.expr(e.cond), dt.with_lanes("bool", cond_lanes))
            first = self.op(f"extractelement <{cond_lanes} x i1> {vc[0]}, i32 0")
            if self._in_tree or any(isinstance(v, Select) and v.guarded
                                    for v in (e.true_value, e.false_value)):
                # NOTE: a tree of selects on an outer index (a concatenation of many inputs)
                # branches on it, leaves included: lane-masked, every leaf's loads ran for
                # every vector; the branches agree across the vector
                outer, self._in_tree = self._in_tree, True
                try:
                    return self._branch_select(e, first)
                finally:
                    self._in_tree = outer
            # NOTE: one condition for the whole vector, loads on both sides (a concatenation):
            # the untaken side's loads are clamped to its buffer's start, not masked. A
            # masked-off load keeps its address, here shifted by the other input's extent, and
            # where that lands on a page never touched some CPUs (Zen 4 here) take a slow path
            # on every such load. A padding test (a constant on one side) stays masked: its
            # addresses stay within a row of the buffer, and the masked loads run faster.
            return self._guarded_select(e, first)
        c = self.expr(e.cond)
        cond_lanes = dt.lanes(c[1])  # as rendered (a node's dtype may understate its lanes)
        c = self.cast_to(c, dt.with_lanes("bool", cond_lanes))
        t, f = self.expr(e.true_value), self.expr(e.false_value)
        n = max(lanes, dt.lanes(t[1]), dt.lanes(f[1]), cond_lanes)
        t, f = self.broadcast(t, n), self.broadcast(f, n)
        if f[1] != t[1]:
            f = self.cast_to(f, t[1])
        if cond_lanes not in (1, n):
            c = self.broadcast(c, n)
        return self.op(f"select {T.ll_type(c[1])} {c[0]}, {T.ll_type(t[1])} {t[0]}, "
                       f"{T.ll_type(t[1])} {f[0]}"), t[1]

    def _narrow(self, c: str) -> None:
        """Restrict the clamp context by the scalar i1 ``c``."""
        self.clamp = c if self.clamp is None else self.op(f"and i1 {self.clamp}, {c}")
        if self.vclamp is not None:
            n = dt.lanes(self.vclamp[1])
            vc = self.broadcast((c, "bool"), n)
            self.vclamp = (self.op(f"and <{n} x i1> {self.vclamp[0]}, {vc[0]}"), self.vclamp[1])

    def _guarded_vector_select(self, e: Select) -> V:
        # NOTE: a lane-wise ``if_then_else``: vector loads in each branch are masked by the
        # lanes that take it; scalar loads are clamped unless some lane takes the branch.
        uniform = _uniform(e.cond)
        if not (_clampable(e.true_value, uniform) and _clampable(e.false_value, uniform)):
            raise CodegenError("a vector if_then_else over buffers of unknown size cannot be "
                               "rendered safely; do not vectorize this loop")
        n = dt.lanes(e.cond.dtype)
        bd = dt.with_lanes("bool", n)
        c = self.cast_to(self.expr(e.cond), bd)[0]
        nc = self.op(f"xor <{n} x i1> {c}, splat (i1 true)")
        outer, vouter = self.clamp, self.vclamp
        name = f"llvm.vector.reduce.or.v{n}i1"
        self.declare(f"declare i1 @{name}(<{n} x i1>)")
        vals = []
        try:
            for mask in (c, nc):
                self.clamp, self.vclamp = outer, vouter
                vm = mask if vouter is None else self.op(f"and <{n} x i1> {vouter[0]}, {mask}")
                anyl = self.op(f"call i1 @{name}(<{n} x i1> {vm})")
                self.clamp = anyl if outer is None else self.op(f"and i1 {outer}, {anyl}")
                self.vclamp = (vm, bd)
                vals.append(self.expr(e.true_value if mask is c else e.false_value))
        finally:
            self.clamp, self.vclamp = outer, vouter
        t, f = self.broadcast(vals[0], n), self.broadcast(vals[1], n)
        if f[1] != t[1]:
            f = self.cast_to(f, t[1])
        ty = T.ll_type(t[1])
        return self.op(f"select <{n} x i1> {c}, {ty} {t[0]}, {ty} {f[0]}"), t[1]

    def _guarded_select(self, e: Select, cond: str | None = None) -> V:
        # NOTE: ``if_then_else`` must not evaluate the untaken branch (its loads may be out of
        # bounds, e.g. padding). When the only hazards in the taken branch are loads from
        # buffers of known size, it is rendered branch-free: every load index is clamped to 0
        # when the condition is false, then a ``select`` picks the value. That keeps padded
        # loops straight-line (vectorizable, fewer blocks, faster to compile). Otherwise it
        # becomes branches joined by a phi.
        c = self.cast_to(self.expr(e.cond), "bool") if cond is None else (cond, "bool")
        if _clampable(e.true_value) and _clampable(e.false_value):
            outer, vouter = self.clamp, self.vclamp
            nc = self.op(f"xor i1 {c[0]}, true")
            try:
                self._narrow(c[0])
                t = self.expr(e.true_value)
                self.clamp, self.vclamp = outer, vouter
                self._narrow(nc)
                f = self.expr(e.false_value)
            finally:
                self.clamp, self.vclamp = outer, vouter
            n = max(dt.lanes(t[1]), dt.lanes(f[1]))
            t, f = self.broadcast(t, n), self.broadcast(f, n)
            if f[1] != t[1]:
                f = self.cast_to(f, t[1])
            ty = T.ll_type(t[1])
            return self.op(f"select i1 {c[0]}, {ty} {t[0]}, {ty} {f[0]}"), t[1]
        return self._branch_select(e, c[0])

    def _branch_select(self, e: Select, c: str) -> V:
        """``e`` as branches on the scalar i1 ``c`` joined by a phi (only the taken branch
        runs)."""
        lt, lf, lj = self.new_label("sel_t"), self.new_label("sel_f"), self.new_label("sel_j")
        self.emit(f"br i1 {c}, label %{lt}, label %{lf}")
        self.start_block(lt)
        t = self.expr(e.true_value)
        t_end = self.cur_block
        self.emit(f"br label %{lj}")
        self.start_block(lf)
        f = self.expr(e.false_value)
        if f[1] != t[1]:
            f = self.cast_to(f, t[1])
        f_end = self.cur_block
        self.emit(f"br label %{lj}")
        self.start_block(lj)
        ty = T.ll_type(t[1])
        return self.op(f"phi {ty} [{t[0]}, %{t_end}], [{f[0]}, %{f_end}]"), t[1]

    # --------------------------------------------------------------------------- memory
    def address(self, buf: Buffer, index: PrimExpr) -> tuple[str, int, bool]:
        """Pointer to ``buf[index]``: (pointer or vector of pointers, lanes, contiguous)."""
        base = self.buffer_ptr(buf)
        ety = T.mem_type(dt.element_of(buf.dtype))
        lanes = dt.lanes(index.dtype)
        if self.clamp is not None and not (lanes > 1 and self.vclamp is not None):
            return self._clamped_address(base, ety, index, lanes)
        if lanes == 1:
            i = self.expr(index)
            return self.op(f"getelementptr inbounds {ety}, ptr {base}, {T.ll_type(i[1])} {i[0]}"), 1, True
        if isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value == 1:
            i = self.expr(index.base)
            return self.op(f"getelementptr inbounds {ety}, ptr {base}, {T.ll_type(i[1])} {i[0]}"), lanes, True
        i = self.expr(index)
        return self.op(f"getelementptr inbounds {ety}, ptr {base}, {T.ll_type(i[1])} {i[0]}"), lanes, False

    def prefetch(self, e: Load) -> None:
        """Prefetch the line of ``e``'s element into L2 (``prefetcht1``; the load is not
        performed). No ``inbounds``: the last iterations prefetch past the buffer's end."""
        if not isinstance(e, Load) or dt.lanes(e.index.dtype) != 1:
            raise CodegenError(f"prefetch needs a scalar buffer element, got {e!r}")
        i = self.expr(e.index)
        ety = T.mem_type(dt.element_of(e.buffer.dtype))
        p = self.op(f"getelementptr {ety}, ptr {self.buffer_ptr(e.buffer)}, "
                    f"{T.ll_type(i[1])} {i[0]}")
        self.declare("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
        self.emit(f"call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 2, i32 1)")

    def _clamped_address(self, base: str, ety: str, index: PrimExpr,
                         lanes: int) -> tuple[str, int, bool]:
        c = self.clamp
        if lanes > 1 and isinstance(index, Ramp) and isinstance(index.stride, IntImm) \
                and index.stride.value == 1:
            i = self.expr(index.base)
            contiguous = True
        else:
            i = self.expr(index)
            contiguous = lanes == 1
        ty = T.ll_type(i[1])
        zero = "zeroinitializer" if dt.lanes(i[1]) > 1 else "0"
        safe = self.op(f"select i1 {c}, {ty} {i[0]}, {ty} {zero}")
        return self.op(f"getelementptr inbounds {ety}, ptr {base}, {ty} {safe}"), lanes, contiguous

    def _mask(self, pred: PrimExpr | None, lanes: int) -> str:
        if pred is None:
            return "splat (i1 true)" if lanes > 1 else "true"
        return self.broadcast(self.cast_to(self.expr(pred), dt.with_lanes("bool", dt.lanes(pred.dtype))), lanes)[0]

    @handles(Load, table="expr")
    def expr_Load(self, e: Load) -> V:
        if e.predicate is not None and dt.lanes(e.index.dtype) == 1:
            # a predicated scalar load reads only when the predicate holds (0 otherwise)
            plain = Load(e.buffer, e.index)
            return self._guarded_select(Select(e.predicate, plain,
                                               const(0, e.buffer.dtype), guarded=True))
        elem = dt.element_of(e.buffer.dtype)
        ptr, lanes, contiguous = self.address(e.buffer, e.index)
        vd = dt.with_lanes(elem, lanes)
        mty, al = T.mem_type(vd), T.align_of(elem)
        masked = lanes > 1 and (e.predicate is not None or self.vclamp is not None)
        if masked:
            mask = self._mask(e.predicate, lanes)
            if self.vclamp is not None:
                vm = self.broadcast(self.vclamp, lanes)[0]
                mask = self.op(f"and <{lanes} x i1> {mask}, {vm}")
            kind = "load" if contiguous else "gather"
            pty = "p0" if contiguous else f"v{lanes}p0"
            name = f"llvm.masked.{kind}.{T.suffix(vd) if elem != 'bool' else f'v{lanes}i8'}.{pty}"
            pt = "ptr" if contiguous else f"<{lanes} x ptr>"
            self.declare(f"declare {mty} @{name}({pt}, i32, <{lanes} x i1>, {mty})")
            v = self.op(f"call {mty} @{name}({pt} {ptr}, i32 {al}, <{lanes} x i1> {mask}, "
                        f"{mty} zeroinitializer)")
        elif contiguous:
            v = self.op(f"load {mty}, ptr {ptr}, align {al}")
        else:
            name = f"llvm.masked.gather.{T.suffix(vd) if elem != 'bool' else f'v{lanes}i8'}.v{lanes}p0"
            self.declare(f"declare {mty} @{name}(<{lanes} x ptr>, i32, <{lanes} x i1>, {mty})")
            v = self.op(f"call {mty} @{name}(<{lanes} x ptr> {ptr}, i32 {al}, "
                        f"<{lanes} x i1> splat (i1 true), {mty} poison)")
        if elem == "bool":
            v = self.op(f"icmp ne {mty} {v}, zeroinitializer")
        return v, vd

    def store(self, buf: Buffer, index: PrimExpr, value: PrimExpr, pred: PrimExpr | None) -> None:
        elem = dt.element_of(buf.dtype)
        v = self.expr(value)
        ptr, lanes, contiguous = self.address(buf, index)
        vd = dt.with_lanes(elem, lanes)
        v = self.broadcast(v, lanes)
        if v[1] != vd:
            v = self.cast_to(v, vd)
        mty, al = T.mem_type(vd), T.align_of(elem)
        x = v[0]
        if elem == "bool":
            x = self.op(f"zext {T.ll_type(vd)} {x} to {mty}")
        if pred is not None and lanes == 1:
            c = self.cast_to(self.expr(pred), "bool")
            ls, lj = self.new_label("st"), self.new_label("st_j")
            self.emit(f"br i1 {c[0]}, label %{ls}, label %{lj}")
            self.start_block(ls)
            self.emit(f"store {mty} {x}, ptr {ptr}, align {al}")
            self.emit(f"br label %{lj}")
            self.start_block(lj)
        elif pred is not None or not contiguous:
            mask = self._mask(pred, lanes)
            kind = "store" if contiguous else "scatter"
            pt = "ptr" if contiguous else f"<{lanes} x ptr>"
            sfx = T.suffix(vd) if elem != "bool" else f"v{lanes}i8"
            name = f"llvm.masked.{kind}.{sfx}.{'p0' if contiguous else f'v{lanes}p0'}"
            self.declare(f"declare void @{name}({mty}, {pt}, i32, <{lanes} x i1>)")
            self.emit(f"call void @{name}({mty} {x}, {pt} {ptr}, i32 {al}, <{lanes} x i1> {mask})")
        else:
            self.emit(f"store {mty} {x}, ptr {ptr}, align {al}")

