"""Reference evaluator: compute any tensor-expression graph directly with numpy.

Each compute is evaluated over broadcast index grids (one numpy dimension per data axis, then one
per reduce axis); reductions with a known ufunc (sum, product, max, min, and, or) use numpy
reductions, other commutative reducers loop over the flattened reduce positions. Guarded selects
(``if_then_else``) evaluate loads with clipped indices and check that no *taken* position reads out
of bounds, so padding works and a genuinely wrong index is reported. Large computes are split into
chunks along the first data axis (and then the first reduce axis) to bound memory.

This is the oracle for operator tests and the slow fallback reference of the measurement runner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.errors import ExprError
from templtune.te.const_eval import eval_const
from templtune.te.dispatch import Dispatch
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    Cast,
    CommReducer,
    FloatImm,
    IntImm,
    IterVar,
    Not,
    PrimExpr,
    Reduce,
    Select,
    TensorLoad,
    Var,
)
from templtune.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor

__all__ = ["evaluate", "topo_sort"]

# NOTE: elements per evaluation chunk; a conv2d over a full (data x reduce) grid would otherwise
# need gigabytes for realistic layer sizes.
CHUNK_ELEMS = 1 << 22

_NP_BIN = {
    BinOpKind.ADD: np.add, BinOpKind.SUB: np.subtract, BinOpKind.MUL: np.multiply,
    BinOpKind.MIN: np.minimum, BinOpKind.MAX: np.maximum, BinOpKind.EQ: np.equal,
    BinOpKind.NE: np.not_equal, BinOpKind.LT: np.less, BinOpKind.LE: np.less_equal,
    BinOpKind.GT: np.greater, BinOpKind.GE: np.greater_equal, BinOpKind.AND: np.logical_and,
    BinOpKind.OR: np.logical_or, BinOpKind.FLOORDIV: np.floor_divide,
    BinOpKind.FLOORMOD: np.mod,
}
_REDUCE_UFUNC = {BinOpKind.ADD: np.add, BinOpKind.MUL: np.multiply, BinOpKind.MAX: np.maximum,
                 BinOpKind.MIN: np.minimum, BinOpKind.AND: np.logical_and,
                 BinOpKind.OR: np.logical_or}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


_CALLS: dict[str, Callable[..., Any]] = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sigmoid": _sigmoid,
          "fabs": np.abs, "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "pow": np.power,
          "likely": lambda x: x, "exp2": np.exp2, "log2": np.log2, "log10": np.log10,
          "sin": np.sin, "cos": np.cos, "round": np.round, "trunc": np.trunc,
          "erf": np.vectorize(math.erf, otypes=[np.float64])}


def topo_sort(outputs: Sequence[Tensor], leaves: Any = ()) -> list[Operation]:
    """Operations reachable from ``outputs``, producers before consumers (the inputs of
    operations in ``leaves`` are not visited)."""
    order: list[Operation] = []
    seen: set[int] = set()
    stack: list[tuple[Operation, bool]] = [(t.op, False) for t in reversed(list(outputs))]
    while stack:
        op, done = stack.pop()
        if done:
            if id(op) not in seen:
                seen.add(id(op))
                order.append(op)
            continue
        if id(op) in seen:
            continue
        stack.append((op, True))
        if op in leaves:
            continue
        for t in reversed(op.input_tensors):
            if id(t.op) not in seen:
                stack.append((t.op, False))
    return order


class _Evaluator:
    def __init__(self, shape_env: dict[Var, int]) -> None:
        self.values: dict[Operation, list[np.ndarray]] = {}
        self.shape_env = shape_env

    def shape_of(self, t: Tensor) -> tuple[int, ...]:
        try:
            return tuple(int(eval_const(s, self.shape_env)) for s in t.shape)
        except ExprError as err:
            raise ExprError(f"shape of {t.name} is not known: {err}") from err

    # --------------------------------------------------------------------------- expressions

    def ev(self, e: Any, env: dict[Var, Any], active: Any, memo: dict[Any, Any]) -> Any:
        r = memo.get(e)
        if r is not None:
            return r
        r = self._ev(e, env, active, memo)
        memo[e] = r
        return r

    def _ev(self, e: Any, env: dict[Var, Any], active: Any, memo: dict[Any, Any]) -> Any:
        return _EVAL(self, e, env, active, memo)

    def _load(self, e: TensorLoad, env: dict[Var, Any], active: Any,
              memo: dict[Any, Any]) -> Any:
        arr = self.values[e.tensor.op][e.tensor.value_index]
        idx = []
        for k, (ie, n) in enumerate(zip(e.indices, arr.shape)):
            i = np.asarray(self.ev(ie, env, active, memo)).astype(np.int64, copy=False)
            bad = (i < 0) | (i >= n)
            if np.any(np.logical_and(bad, active)):
                pos = np.argwhere(np.broadcast_to(np.logical_and(bad, active), np.broadcast(
                    bad, active).shape))
                raise ExprError(
                    f"out-of-bounds read of {e.tensor.name}: dimension {k} (extent {n}) indexed "
                    f"with {ie}, e.g. at grid position {tuple(int(x) for x in pos[0])}")
            idx.append(np.clip(i, 0, max(n - 1, 0)))
        return arr[tuple(idx)]

    # ------------------------------------------------------------------------------ computes

    def run_compute(self, op: ComputeOp) -> list[np.ndarray]:
        dshape = self.shape_of(op.output(0))
        rshape = []
        for iv in op.reduce_axis:
            lo = int(eval_const(iv.dom.min, self.shape_env))  # type: ignore[union-attr]
            ext = int(eval_const(iv.dom.extent, self.shape_env))  # type: ignore[union-attr]
            rshape.append((lo, ext))
        outs = [np.empty(dshape, dt.to_numpy(t.dtype)) for t in
                (op.output(i) for i in range(op.num_outputs))]
        if any(s == 0 for s in dshape):
            return outs
        per_row = math.prod(dshape[1:]) * math.prod(e for _, e in rshape) if dshape else 1
        rows = max(1, CHUNK_ELEMS // max(per_row, 1)) if dshape else 1
        n0 = dshape[0] if dshape else 1
        for start in range(0, n0, rows):
            stop = min(n0, start + rows)
            res = self._chunk(op, dshape, rshape, start, stop)
            for o, r in zip(outs, res):
                if dshape:
                    o[start:stop] = r
                else:
                    o[()] = r
        return outs

    def _grid(self, op: ComputeOp, dshape: tuple[int, ...], start: int, stop: int,
              raxes: list[tuple[IterVar, int, int]]) -> tuple[dict[Var, Any], tuple[int, ...]]:
        nd = len(dshape) + len(raxes)
        env: dict[Var, Any] = {}
        full: list[int] = []
        for k, iv in enumerate(op.axis):
            lo, hi = (start, stop) if k == 0 else (0, dshape[k])
            shp = [1] * nd
            shp[k] = hi - lo
            env[iv.var] = np.arange(lo, hi, dtype=np.int64).reshape(shp)
            full.append(hi - lo)
        for j, (iv, lo, ext) in enumerate(raxes):
            shp = [1] * nd
            shp[len(dshape) + j] = ext
            env[iv.var] = np.arange(lo, lo + ext, dtype=np.int64).reshape(shp)
            full.append(ext)
        return env, tuple(full)

    def _chunk(self, op: ComputeOp, dshape: tuple[int, ...], rshape: list[tuple[int, int]],
               start: int, stop: int) -> list[np.ndarray]:
        body0 = op.body[0]
        if not isinstance(body0, Reduce):
            env, full = self._grid(op, dshape, start, stop, [])
            memo: dict[Any, Any] = {}
            return [np.broadcast_to(self.ev(b, env, True, memo), full).astype(
                dt.to_numpy(b.dtype)) for b in op.body]
        red: Reduce = body0
        # chunk the first reduce axis when one data row times the reduce grid is too large
        per = (stop - start) * math.prod(dshape[1:]) * math.prod(e for _, e in rshape[1:])
        step = max(1, CHUNK_ELEMS // max(per, 1)) if rshape else 1
        lo0, ext0 = rshape[0] if rshape else (0, 1)
        acc: list[np.ndarray] | None = None
        for r0 in range(lo0, lo0 + ext0, step):
            r_ext = min(step, lo0 + ext0 - r0)
            raxes = [(iv, lo, ext) for iv, (lo, ext) in zip(red.axis, rshape)]
            if raxes:
                raxes[0] = (raxes[0][0], r0, r_ext)
            env, full = self._grid(op, dshape, start, stop, raxes)
            part = self._reduce(red, env, full, len(dshape))
            acc = part if acc is None else self._combine(red.combiner, acc, part)
        assert acc is not None
        if red.init:
            env, full = self._grid(op, dshape, start, stop, [])
            memo2: dict[Any, Any] = {}
            init = [np.broadcast_to(self.ev(i, env, True, memo2), full[:len(dshape)])
                    for i in red.init]
            acc = self._combine(red.combiner, init, acc)
        return [np.asarray(acc[k]).astype(dt.to_numpy(op.body[k].dtype)) for k in
                range(op.num_outputs)]

    def _reduce(self, red: Reduce, env: dict[Var, Any], full: tuple[int, ...],
                nd: int) -> list[np.ndarray]:
        memo: dict[Any, Any] = {}
        cond = np.broadcast_to(self.ev(red.condition, env, True, memo), full)
        srcs = [np.broadcast_to(self.ev(s, env, cond, memo), full) for s in red.source]
        comb = red.combiner
        idents = [np.asarray(eval_const(i)).astype(dt.to_numpy(i.dtype)) for i in comb.identity]
        vals = [np.where(cond, s, ident) for s, ident in zip(srcs, idents)]
        raxes = tuple(range(nd, len(full)))
        if len(vals) == 1:
            r = comb.result[0]
            if isinstance(r, BinOp) and r.op in _REDUCE_UFUNC and {r.a, r.b} == {comb.lhs[0],
                                                                               comb.rhs[0]}:
                if not raxes:
                    return [vals[0]]
                return [_REDUCE_UFUNC[r.op].reduce(vals[0], axis=raxes)]
        # general commutative reducer: fold over the flattened reduce positions
        flat = [v.reshape(full[:nd] + (-1,)) for v in vals]
        acc = [np.broadcast_to(i, full[:nd]).copy() for i in idents]
        for p in range(flat[0].shape[-1]):
            acc = self._combine(comb, acc, [f[..., p] for f in flat])
        return acc

    def _combine(self, comb: CommReducer, a: list[np.ndarray], b: list[np.ndarray]
                 ) -> list[np.ndarray]:
        env = dict(zip(comb.lhs, a)) | dict(zip(comb.rhs, b))
        memo: dict[Any, Any] = {}
        return [np.asarray(self.ev(r, env, True, memo)).astype(dt.to_numpy(r.dtype),
                                                                copy=False)
                for r in comb.result]


def _bind_shapes(inputs: Mapping[Tensor, np.ndarray]) -> dict[Var, int]:
    env: dict[Var, int] = {}
    for t, a in inputs.items():
        if len(t.shape) != np.ndim(a):
            raise ExprError(f"input {t.name} has {len(t.shape)} dimensions, the array has "
                            f"{np.ndim(a)}")
        for s, n in zip(t.shape, np.shape(a)):
            if isinstance(s, Var):
                if env.setdefault(s, n) != n:
                    raise ExprError(f"shape variable {s.name} bound to {env[s]} and {n}")
    return env


# ------------------------------------------------------------------- expression table
# Handlers: (evaluator, node, env, active, memo) -> numpy value over the index grid.
_EVAL: Dispatch[Any] = Dispatch(
    "evaluate", missing=lambda e: ExprError(f"evaluate: not an expression: {e!r}"))
Env = dict[Var, Any]
Memo = dict[Any, Any]


@_EVAL.register(IntImm, FloatImm)
def _imm(ev: _Evaluator, e: IntImm | FloatImm, env: Env, active: Any, memo: Memo) -> Any:
    return dt.to_numpy(e.dtype).type(e.value)


@_EVAL.register(Var)
def _var(ev: _Evaluator, e: Var, env: Env, active: Any, memo: Memo) -> Any:
    if e in env:
        return env[e]
    if e in ev.shape_env:
        return np.int64(ev.shape_env[e])
    raise ExprError(f"variable {e.name} has no value (not an axis of this compute)")


@_EVAL.register(BinOp)
def _binop(ev: _Evaluator, e: BinOp, env: Env, active: Any, memo: Memo) -> Any:
    a = ev.ev(e.a, env, active, memo)
    b = ev.ev(e.b, env, active, memo)
    if e.op is BinOpKind.DIV:
        if dt.is_float(e.dtype):
            return np.true_divide(a, b).astype(dt.to_numpy(e.dtype), copy=False)
        q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
        return np.where((a >= 0) == (b >= 0), q, -q)
    if e.op in (BinOpKind.FLOORDIV, BinOpKind.FLOORMOD):
        b = np.where(b == 0, 1, b)  # masked-out positions may divide by zero
    return _NP_BIN[e.op](a, b)


@_EVAL.register(Not)
def _not(ev: _Evaluator, e: Not, env: Env, active: Any, memo: Memo) -> Any:
    return np.logical_not(ev.ev(e.a, env, active, memo))


@_EVAL.register(Select)
def _select(ev: _Evaluator, e: Select, env: Env, active: Any, memo: Memo) -> Any:
    c = ev.ev(e.cond, env, active, memo)
    if e.guarded:
        t = ev.ev(e.true_value, env, np.logical_and(active, c), {})
        f = ev.ev(e.false_value, env, np.logical_and(active, np.logical_not(c)), {})
    else:
        t = ev.ev(e.true_value, env, active, memo)
        f = ev.ev(e.false_value, env, active, memo)
    return np.where(c, t, f).astype(dt.to_numpy(e.dtype), copy=False)


@_EVAL.register(Cast)
def _cast(ev: _Evaluator, e: Cast, env: Env, active: Any, memo: Memo) -> Any:
    v = ev.ev(e.value, env, active, memo)
    if dt.is_int(e.dtype) and dt.is_float(e.value.dtype):
        v = np.trunc(v)
    return np.asarray(v).astype(dt.to_numpy(e.dtype))


@_EVAL.register(Call)
def _call(ev: _Evaluator, e: Call, env: Env, active: Any, memo: Memo) -> Any:
    fn = _CALLS.get(e.name)
    if fn is None:
        raise ExprError(f"evaluate: unsupported intrinsic {e.name}")
    args = [ev.ev(a, env, active, memo) for a in e.args]
    return np.asarray(fn(*args)).astype(dt.to_numpy(e.dtype), copy=False)


@_EVAL.register(TensorLoad)
def _tensor_load(ev: _Evaluator, e: TensorLoad, env: Env, active: Any, memo: Memo) -> Any:
    return ev._load(e, env, active, memo)


@_EVAL.register(Reduce)
def _reduce(ev: _Evaluator, e: Reduce, env: Env, active: Any, memo: Memo) -> Any:
    raise ExprError("a reduction may only be the whole body of a compute")


@_EVAL.register(PrimExpr)
def _unsupported(ev: _Evaluator, e: PrimExpr, env: Env, active: Any, memo: Memo) -> Any:
    raise ExprError(f"evaluate: unsupported expression node {type(e).__name__}")


def evaluate(outputs: Tensor | Sequence[Tensor], inputs: Mapping[Tensor, Any]
             ) -> list[np.ndarray]:
    """Compute ``outputs`` from ``inputs`` with numpy.

    Parameters
    ----------
    outputs : Tensor or sequence of Tensor
        Tensors to compute (any op of the graph).
    inputs : Mapping[Tensor, array_like]
        Values of every placeholder reached (and optionally of intermediate tensors, which are
        then not recomputed). Symbolic shape variables are bound from the array shapes.

    Returns
    -------
    list of numpy.ndarray
        One array per output, with the tensor's dtype.
    """
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    arrays = {t: np.asarray(a) for t, a in inputs.items()}
    ev = _Evaluator(_bind_shapes(arrays))
    given: dict[Operation, dict[int, np.ndarray]] = {}
    for t, a in arrays.items():
        shp = ev.shape_of(t)
        if a.shape != shp:
            raise ExprError(f"input {t.name}: expected shape {shp}, got {a.shape}")
        given.setdefault(t.op, {})[t.value_index] = a.astype(dt.to_numpy(t.dtype), copy=False)
    with np.errstate(all="ignore"):
        for op in topo_sort(outs, leaves=given):
            if op in given and len(given[op]) == op.num_outputs:
                ev.values[op] = [given[op][i] for i in range(op.num_outputs)]
            elif isinstance(op, PlaceholderOp):
                raise ExprError(f"evaluate: no value given for placeholder {op.name}")
            elif isinstance(op, ComputeOp):
                ev.values[op] = ev.run_compute(op)
            else:
                raise ExprError(f"evaluate: unsupported operation {op!r}")
    return [ev.values[t.op][t.value_index] for t in outs]
