"""Hand-built loop-IR functions for backend tests (no schedule or lowering needed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from templtune.lower.ir import (
    Allocate,
    Broadcast,
    Buffer,
    For,
    ForKind,
    Load,
    PrimFunc,
    Ramp,
    Store,
    seq,
)
from templtune.te.expr import PrimExpr, Var, const


def elementwise(fn: Callable[..., PrimExpr], in_dtypes: Sequence[str], out_dtype: str, n: int,
                lanes: int = 1, kind: ForKind = ForKind.SERIAL,
                name: str = "ew") -> PrimFunc:
    """``C[i] = fn(A0[i], A1[i], ...)`` for ``i < n``; with ``lanes > 1`` the loop steps by
    ``lanes`` and every access is a stride-1 Ramp (vector code)."""
    if n % lanes:
        raise ValueError("n must be a multiple of lanes")
    ins = tuple(Buffer(f"A{j}", (const(n),), d) for j, d in enumerate(in_dtypes))
    out = Buffer("C", (const(n),), out_dtype)
    i = Var("i")
    idx: PrimExpr = i if lanes == 1 else Ramp(i * lanes, const(1), lanes)
    loads = [Load(b, idx) for b in ins]
    body = Store(out, idx, fn(*loads))
    return PrimFunc(name, ins + (out,), For(i, const(0), const(n // lanes), kind, body))


def matmul(n: int, m: int, k: int, lanes: int = 16, parallel: bool = True,
           unroll_k: int = 1, dtype: str = "float32", name: str = "matmul") -> PrimFunc:
    """``C[n, m] = A[n, k] @ B[k, m]`` with a local accumulator row (Allocate), the ``m`` axis
    vectorized by ``lanes`` (Ramp/Broadcast), the outer row loop parallel, and the ``k`` loop
    optionally split with an UNROLLED inner loop."""
    if m % lanes or k % unroll_k:
        raise ValueError("m must be a multiple of lanes and k of unroll_k")
    a = Buffer("A", (const(n), const(k)), dtype)
    b = Buffer("B", (const(k), const(m)), dtype)
    c = Buffer("C", (const(n), const(m)), dtype)
    acc = Buffer("acc", (const(m),), dtype, scope="local")
    i, jo, ko, ki, j2 = Var("i"), Var("jo"), Var("ko"), Var("ki"), Var("j2")
    kk = ko * unroll_k + ki
    vec = Ramp(jo * lanes, const(1), lanes)
    update = Store(acc, vec, Load(acc, vec)
                   + Broadcast(Load(a, i * k + kk), lanes) * Load(b, Ramp(kk * m + jo * lanes,
                                                                          const(1), lanes)))
    kloop = For(ko, const(0), const(k // unroll_k), ForKind.SERIAL,
                For(ki, const(0), const(unroll_k),
                    ForKind.UNROLLED if unroll_k > 1 else ForKind.SERIAL, update))
    init = For(jo, const(0), const(m // lanes), ForKind.SERIAL,
               Store(acc, vec, Broadcast(const(0.0, dtype), lanes)))
    compute = For(jo, const(0), const(m // lanes), ForKind.SERIAL, kloop)
    write = For(j2, const(0), const(m), ForKind.SERIAL, Store(c, i * m + j2, Load(acc, j2)))
    row = Allocate(acc, seq(init, compute, write))
    body = For(i, const(0), const(n), ForKind.PARALLEL if parallel else ForKind.SERIAL, row)
    return PrimFunc(name, (a, b, c), body)
