"""Data-dependent rewrites of dense layers (TVM's ``relay.data_dep_optimization``).

:func:`bsr_dense_convert` replaces a ``nn.dense`` whose constant weight is sparse enough by
``nn.sparse_dense`` over the weight's BSR arrays (new parameters ``<weight>.data``,
``<weight>.indices``, ``<weight>.indptr``); :func:`simplify_fc_transpose_convert` folds a
``transpose`` of a constant weight feeding ``nn.dense`` into the parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from templtune.topi.sparse import dense_to_bsr

from .ir import Call, Expr, Function, TensorType, Var
from .op import GraphError
from .ops.sparse_dense import sparse_dense

__all__ = ["bsr_dense_convert", "simplify_fc_transpose_convert", "sparsity"]

Rewrite = Callable[[Call, tuple[Expr, ...]], Expr | None]


def sparsity(w: np.ndarray) -> float:
    """The fraction of zero entries of ``w``."""
    w = np.asarray(w)
    return 1.0 - float(np.count_nonzero(w)) / max(w.size, 1)


def _rewrite(func: Function, rule: Rewrite, extra: list[Var]) -> Function:
    """``func`` with each call passed through ``rule`` (its new arguments given; None keeps
    the call); the parameters no longer used are dropped and ``extra`` ones appended."""
    new: dict[int, Expr] = {id(v): v for v in func.params}
    for c in func.calls():
        args = tuple(new[id(a)] for a in c.args)
        out = rule(c, args)
        if out is None:
            out = c if all(a is b for a, b in zip(args, c.args)) else Call(
                c.op, args, c.attrs, c.type)
        new[id(c)] = out
    body = new[id(func.body)]
    if not isinstance(body, Call):
        raise GraphError("the rewritten network's output is not a call")
    used: set[int] = set()
    for c in [body, *_calls(body)]:
        used.update(id(a) for a in c.args)
    params = tuple(v for v in (*func.params, *extra) if id(v) in used)
    return Function(params, body, func.name)


def _calls(body: Call) -> list[Call]:
    from .ir import topo_order

    return topo_order(body)


def _numpy(x: Any) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


def bsr_dense_convert(func: Function, params: dict[str, Any], blocksize: tuple[int, int],
                      sparsity_threshold: float = 0.85) -> tuple[Function, dict[str, Any]]:
    """Replace ``nn.dense(x, W)`` by ``nn.sparse_dense`` where ``W`` is a parameter with at
    least ``sparsity_threshold`` zeros and a shape that the blocks divide.

    Parameters
    ----------
    func : Function
        The network (``mod["main"]``).
    params : dict of str to array
        Its parameters; converted weights are replaced by ``<name>.data``,
        ``<name>.indices`` and ``<name>.indptr``.
    blocksize : (int, int)
        The BSR block shape ``(bs_r, bs_c)``.
    sparsity_threshold : float
        The least fraction of zeros that converts a weight.

    Returns
    -------
    (Function, dict)
        The network and its parameters.
    """
    bs_r, bs_c = (int(b) for b in blocksize)
    if bs_r < 1 or bs_c < 1:
        raise GraphError(f"bsr_dense: bad block size {blocksize!r}")
    new_params = dict(params)
    extra: list[Var] = []
    done: dict[str, tuple[Var, Var, Var, int]] = {}

    def rule(c: Call, args: tuple[Expr, ...]) -> Expr | None:
        w = c.args[1] if c.op == "nn.dense" else None
        if not isinstance(w, Var) or w.name not in params:
            return None
        n, k = w.shape
        if n % bs_r or k % bs_c:
            return None
        if w.name not in done:
            arr = _numpy(params[w.name])
            if sparsity(arr) < sparsity_threshold:
                return None
            bsr = dense_to_bsr(arr, bs_r, bs_c)
            vs = (Var(f"{w.name}.data", TensorType(bsr.data.shape, w.dtype)),
                  Var(f"{w.name}.indices", TensorType(bsr.indices.shape, "int32")),
                  Var(f"{w.name}.indptr", TensorType(bsr.indptr.shape, "int32")))
            for v, a in zip(vs, (bsr.data, bsr.indices, bsr.indptr)):
                new_params[v.name] = a
            extra.extend(vs)
            done[w.name] = (*vs, bsr.max_blocks_per_row)
        d, ind, ptr, mb = done[w.name]
        return sparse_dense(args[0], (d, ind, ptr), max_blocks_per_row=mb)

    out = _rewrite(func, rule, extra)
    names = {v.name for v in out.params}
    return out, {k: v for k, v in new_params.items() if k in names}


def simplify_fc_transpose_convert(func: Function, params: dict[str, Any]
                                  ) -> tuple[Function, dict[str, Any]]:
    """Fold ``nn.dense(x, transpose(W))`` of a 2-D parameter ``W`` into ``nn.dense(x, W')``
    with the new parameter ``<name>.T`` holding ``W.T`` (TVM's ``simplify_fc_transpose``).

    Returns
    -------
    (Function, dict)
        The network and its parameters.
    """
    new_params = dict(params)
    extra: list[Var] = []
    made: dict[str, Var] = {}

    def rule(c: Call, args: tuple[Expr, ...]) -> Expr | None:
        t = c.args[1] if c.op == "nn.dense" else None
        if not (isinstance(t, Call) and t.op == "transpose"):
            return None
        w = t.args[0]
        if not (isinstance(w, Var) and w.name in params and len(w.shape) == 2
                and tuple(t.attr("axes")) == (1, 0)):
            return None
        if w.name not in made:
            v = Var(f"{w.name}.T", TensorType(t.shape, w.dtype))
            new_params[v.name] = np.ascontiguousarray(_numpy(params[w.name]).T)
            extra.append(v)
            made[w.name] = v
        return Call(c.op, (args[0], made[w.name]), c.attrs, c.type)

    out = _rewrite(func, rule, extra)
    names = {v.name for v in out.params}
    return out, {k: v for k, v in new_params.items() if k in names}
