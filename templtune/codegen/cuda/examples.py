"""Hand-built GPU PrimFuncs (loop IR as lowering produces it) with numpy references.

Used by the CUDA tests and by ``scripts/gpu_check.sh``; each builder returns
``(func, make_args, reference)`` where ``make_args(rng)`` gives the input/output arrays and
``reference(*arrays)`` the expected output array of the last argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from templtune.lower.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Load,
    PrimFunc,
    Ramp,
    Stmt,
    Store,
    seq,
)
from templtune.te.expr import Call, PrimExpr, Select, Var, const

Example = tuple[PrimFunc, Callable[[np.random.Generator], list[np.ndarray]],
                Callable[..., np.ndarray]]


def _loop(name: str, extent: int, body_fn: Callable[[Var], Stmt], tag: str = "",
          kind: ForKind | None = None, annotations: tuple[tuple[str, Any], ...] = ()) -> Stmt:
    v = Var(name)
    k = kind or (ForKind.THREAD_BINDING if tag else ForKind.SERIAL)
    return For(v, const(0), const(extent), k, body_fn(v), tag, annotations)


def _buf(name: str, shape: tuple[int, ...], scope: str = "global",
         dtype: str = "float32") -> Buffer:
    return Buffer(name, tuple(const(s) for s in shape), dtype, scope)


def vector_add(n: int = 1000, threads: int = 64) -> Example:
    """``C = A + B`` with a bounds guard (n need not divide by the block size)."""
    a, b, c = _buf("A", (n,)), _buf("B", (n,)), _buf("C", (n,))
    blocks = -(-n // threads)

    def body(bx: Var) -> Stmt:
        def inner(tx: Var) -> Stmt:
            i = bx * threads + tx
            return IfThenElse(Call("bool", "likely", (i < n,)),
                              Store(c, i, Load(a, i) + Load(b, i)))
        return _loop("i_inner", threads, inner, "threadIdx.x")

    func = PrimFunc("default_function", (a, b, c), _loop("i_outer", blocks, body, "blockIdx.x"))
    return (func, lambda rng: [rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32),
                               np.zeros(n, np.float32)],
            lambda x, y, _z: x + y)


def _matmul_parts(m: int, n: int, k: int, tile: int, vt: int, unroll: int,
                  explicit: int) -> Example:
    """Shared-memory tiled matmul ``C = A @ B``; each thread computes ``vt`` columns (vthread)."""
    a, b, c = _buf("A", (m, k)), _buf("B", (k, n)), _buf("C", (m, n))
    a_sh = _buf("A.shared", (tile * tile,), "shared")
    b_sh = _buf("B.shared", (tile * tile * vt,), "shared")
    c_loc = _buf("C.local", (1,), "local")
    wide = tile * vt

    def kernel(by: Var, bx: Var) -> Stmt:
        def per_thread(vx: PrimExpr, ty: Var, tx: Var) -> Stmt:
            def ko_body(ko: Var) -> Stmt:
                fetch_a = _loop("ax0", tile, lambda ty1: _loop(
                    "ax1", tile, lambda tx1: Store(
                        a_sh, ty1 * tile + tx1,
                        Load(a, (by * tile + ty1) * k + ko * tile + tx1)), "threadIdx.x"),
                    "threadIdx.y")
                fetch_b = _loop("bx0", tile, lambda ty1: _loop(
                    "bx1", tile, lambda tx1: _loop(
                        "bi", vt, lambda i: Store(
                            b_sh, ty1 * wide + i * tile + tx1,
                            Load(b, (ko * tile + ty1) * n + bx * wide + i * tile + tx1)))
                    , "threadIdx.x"), "threadIdx.y")
                acc = _loop("ki", tile, lambda ki: Store(
                    c_loc, const(0),
                    Load(c_loc, const(0)) + Load(a_sh, ty * tile + ki)
                    * Load(b_sh, ki * wide + vx * tile + tx)))
                return seq(fetch_a, fetch_b, acc)
            return Allocate(c_loc, seq(
                Store(c_loc, const(0), const(0.0)),
                _loop("ko", k // tile, ko_body),
                Store(c, (by * tile + ty) * n + bx * wide + vx * tile + tx,
                      Load(c_loc, const(0)))))

        def threads(vx: PrimExpr) -> Stmt:
            return _loop("ty", tile, lambda ty: _loop(
                "tx", tile, lambda tx: per_thread(vx, ty, tx), "threadIdx.x"), "threadIdx.y")

        body = _loop("vx", vt, threads, "vthread") if vt > 1 else threads(const(0))
        return Allocate(a_sh, Allocate(b_sh, body))

    ann = (("pragma_auto_unroll_max_step", unroll), ("pragma_unroll_explicit", explicit))
    top = _loop("by", m // tile, lambda by: _loop(
        "bx", n // wide, lambda bx: kernel(by, bx), "blockIdx.x"), "blockIdx.y",
        annotations=ann if unroll else ())
    func = PrimFunc("default_function", (a, b, c), top)
    return (func, lambda rng: [rng.random((m, k), dtype=np.float32),
                               rng.random((k, n), dtype=np.float32),
                               np.zeros((m, n), np.float32)],
            lambda x, y, _z: x @ y)


def tiled_matmul(m: int = 32, n: int = 32, k: int = 32, tile: int = 8, vt: int = 1,
                 unroll: int = 0, explicit: int = 0) -> Example:
    """See :func:`_matmul_parts`; ``n`` must divide by ``tile * vt``, m and k by ``tile``."""
    return _matmul_parts(m, n, k, tile, vt, unroll, explicit)


def vector_copy_exp(n: int = 1024, threads: int = 64, lanes: int = 4,
                    offset: int = 0) -> Example:
    """``B = exp(A)`` through a shared tile loaded with ``lanes``-wide vector copies (aligned
    when ``offset`` is a multiple of ``lanes``), plus a guarded select for padding."""
    total = n + offset
    a, b = _buf("A", (total,)), _buf("B", (n,))
    per_block = threads * lanes
    sh = _buf("A.shared", (per_block,), "shared")

    def block(bx: Var) -> Stmt:
        load = _loop("tx0", threads, lambda tx: Store(
            sh, Ramp(tx * lanes, const(1), lanes),
            Load(a, Ramp(bx * per_block + tx * lanes + offset, const(1), lanes))), "threadIdx.x")

        def compute(tx: Var) -> Stmt:
            def lane(j: Var) -> Stmt:
                src = Load(sh, (threads - 1 - tx) * lanes + j)
                i = bx * per_block + (threads - 1 - tx) * lanes + j
                val = Select(i < n, Call("float32", "exp", (src,)), const(0.0), guarded=True)
                return Store(b, i, val)
            return _loop("j", lanes, lane)
        return Allocate(sh, seq(load, _loop("tx1", threads, compute, "threadIdx.x")))

    func = PrimFunc("default_function", (a, b), _loop("bx", n // per_block, block,
                                                      "blockIdx.x"))
    return (func, lambda rng: [rng.random(total, dtype=np.float32), np.zeros(n, np.float32)],
            lambda x, _y: np.exp(x[offset:]))
