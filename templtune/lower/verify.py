"""Loop-IR verifier: structural checks every lowered function must pass before codegen.

Checks: every variable is defined (parameter, loop, let) before use; every load/store touches a
parameter buffer or one allocated around it; stores' value lanes match their index lanes;
binary operands agree in lanes; a shuffle picks lanes its vector has; thread-binding loops
carry a thread tag and other loops do not.
Violations raise :class:`~templtune.errors.LoweringError` naming the problem.
"""

from __future__ import annotations

from typing import Any

from templtune import dtype as dt
from templtune.errors import LoweringError
from templtune.lower.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    LetStmt,
    Load,
    PrimFunc,
    Shuffle,
    Store,
    shape_vars,
)
from templtune.te.expr import BinOp, FloatImm, IntImm, Var
from templtune.te.functor import children

_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


def _valid_tag(tag: str) -> bool:
    return tag in _TAGS or tag.startswith("vthread") or tag == "cthread"


class _Verifier:
    def __init__(self, params: tuple[Buffer, ...]) -> None:
        # NOTE: shape variables are bound from the arrays' shapes when the function is called
        self.vars: dict[Var, int] = {v: 1 for v in shape_vars(params)}
        self.bufs: dict[Buffer, int] = {b: 1 for b in params}

    def _push(self, d: dict[Any, int], k: Any) -> None:
        d[k] = d.get(k, 0) + 1

    def _pop(self, d: dict[Any, int], k: Any) -> None:
        d[k] -= 1
        if not d[k]:
            del d[k]

    def expr(self, e: Any) -> None:
        stack = [e]
        while stack:
            n = stack.pop()
            t = type(n)
            # NOTE: fast paths for the commonest exact node types (same checks, same visiting
            # order as the generic path below, which handles everything else)
            if t is IntImm or t is FloatImm:
                continue
            if t is BinOp:
                a, b = n.a, n.b
                if a.dtype != b.dtype and dt.lanes(a.dtype) != dt.lanes(b.dtype):
                    raise LoweringError(f"operands with different lanes: {a.dtype} "
                                        f"{n.op.value} {b.dtype}")
                stack.append(a)
                stack.append(b)
                continue
            if isinstance(n, Var):
                if n.dtype != "handle" and n not in self.vars:
                    raise LoweringError(f"variable {n.name} is used outside the loop or let "
                                        f"that defines it (a symbolic variable must be a whole "
                                        f"dimension of an argument's shape)")
                continue
            if isinstance(n, Load):
                if n.buffer not in self.bufs:
                    raise LoweringError(f"load from buffer {n.buffer.name} outside its "
                                        f"allocation")
            elif isinstance(n, Shuffle):
                width = dt.lanes(n.vector.dtype)
                if not n.indices or any(not 0 <= i < width for i in n.indices):
                    raise LoweringError(f"shuffle of a {width}-lane vector picks lanes "
                                        f"{list(n.indices)}")
            elif isinstance(n, BinOp):
                if dt.lanes(n.a.dtype) != dt.lanes(n.b.dtype):
                    raise LoweringError(f"operands with different lanes: {n.a.dtype} "
                                        f"{n.op.value} {n.b.dtype}")
            stack.extend(children(n))

    def stmt(self, s: Any) -> None:
        if isinstance(s, For):
            if not isinstance(s.loop_var, Var):
                raise LoweringError(f"a loop binds {s.loop_var!r}, not a variable (a pass "
                                    "substituted the loop's own variable)")
            self.expr(s.min)
            self.expr(s.extent)
            if s.kind is ForKind.THREAD_BINDING:
                if not _valid_tag(s.thread_tag):
                    raise LoweringError(f"thread-binding loop {s.loop_var.name} has an invalid "
                                        f"thread tag {s.thread_tag!r}")
            elif s.thread_tag:
                raise LoweringError(f"loop {s.loop_var.name} of kind {s.kind.name} carries a "
                                    f"thread tag {s.thread_tag!r}")
            self._push(self.vars, s.loop_var)
            self.stmt(s.body)
            self._pop(self.vars, s.loop_var)
            return
        if isinstance(s, LetStmt):
            if not isinstance(s.var, Var):
                raise LoweringError(f"a let binds {s.var!r}, not a variable")
            self.expr(s.value)
            self._push(self.vars, s.var)
            self.stmt(s.body)
            self._pop(self.vars, s.var)
            return
        if isinstance(s, Allocate):
            self._push(self.bufs, s.buffer)
            self.stmt(s.body)
            self._pop(self.bufs, s.buffer)
            return
        if isinstance(s, Store):
            if s.buffer not in self.bufs:
                raise LoweringError(f"store to buffer {s.buffer.name} outside its allocation")
            li, lv = dt.lanes(s.index.dtype), dt.lanes(s.value.dtype)
            if li != lv:
                raise LoweringError(f"store to {s.buffer.name}: value has {lv} lanes but the "
                                    f"index has {li}")
            if dt.element_of(s.value.dtype) != s.buffer.dtype:
                raise LoweringError(f"store to {s.buffer.name}: value dtype {s.value.dtype} "
                                    f"does not match buffer dtype {s.buffer.dtype}")
        for c in children(s):
            if hasattr(c, "dtype"):
                self.expr(c)
            else:
                self.stmt(c)


def verify(func: PrimFunc) -> None:
    """Check ``func``; raise :class:`LoweringError` naming the first problem found."""
    _Verifier(func.params).stmt(func.body)
