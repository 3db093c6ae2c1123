"""Fold data movement of bound parameters into new parameters (Relay's FoldConstant after
``bind_params_by_name``, for the ops ConvertLayout puts on weights).

A ``layout_transform``, ``reshape`` or ``transpose`` whose inputs are all bound parameters
is computed once with its numpy reference; the call is replaced by a parameter holding the
result, so the kernels read weights already laid out as they need and no kernel re-lays them
per run.

A ``where`` whose condition is a bound parameter and whose one branch is a bound element of
magnitude at least 2**64 (or infinite), the other a run-time value ``x``, becomes ``x + bias``
with the bias (0 where ``x`` is kept, the element elsewhere) bound once: a transformer's
causal mask (``where(causal, scores, finfo.min)``) in the additive form the attention fusion
takes. The two agree exactly for ``|x| < 2**39`` (``x`` rounds away beside the element).

A network without such calls is returned as it is (same object).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .ir import Call, Expr, Function, TensorType, Var, topo_order
from .op import get_op, make_call

FOLDABLE = frozenset({"layout_transform", "reshape", "transpose"})
#: the least magnitude of a ``where`` branch that absorbs the other branch in an add
HUGE = 2.0 ** 64


def _suffix(c: Call) -> str:
    return str(c.attr("dst_layout")) if c.op == "layout_transform" else c.op


def fold_constants(mod: Function, params: dict[str, np.ndarray]
                   ) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` with foldable calls on parameters replaced by new parameters.

    Parameters
    ----------
    mod : Function
    params : dict of str to ndarray
        The bound parameters (values of some of ``mod.params``).

    Returns
    -------
    (Function, dict)
        The folded network and its parameters: the folded values are added (named after the
        parameter and the transform, e.g. ``conv0_weight_HWIO``) and parameters no longer read
        are dropped.
    """
    calls = mod.calls()
    if not any(c.op in FOLDABLE or c.op == "where" for c in calls):
        return mod, params
    const = {id(v): params[v.name] for v in mod.params if v.name in params}
    names = {v.name for v in mod.params}
    new_params = dict(params)
    swap: dict[int, Expr] = {}
    folded: list[Var] = []

    def bind(name: str, value: np.ndarray) -> Var:
        """A new parameter holding ``value``, named ``name`` (made unique)."""
        while name in names:
            name += "_"
        names.add(name)
        v = Var(name, TensorType(tuple(value.shape), str(value.dtype)))
        const[id(v)], new_params[name] = value, value
        folded.append(v)
        return v

    for c in calls:
        args = tuple(swap.get(id(a), a) for a in c.args)
        if c.op in FOLDABLE and all(id(a) in const for a in args):
            value = np.ascontiguousarray(get_op(c.op).reference(
                [const[id(a)] for a in args], dict(c.attrs)), dtype=c.dtype)
            first = args[0]
            assert isinstance(first, Var)
            swap[id(c)] = bind(f"{first.name}_{_suffix(c)}", value)
        elif c.op == "where" and (masked := _where_as_add(c, args, const)) is not None:
            x, value = masked
            name = f"{args[0].name}_bias" if isinstance(args[0], Var) else "where_bias"
            swap[id(c)] = make_call("add", [x, bind(name, value)])
        elif any(n is not o for n, o in zip(args, c.args)):
            swap[id(c)] = dataclasses.replace(c, args=args)
    if not folded:
        return mod, params
    body = swap.get(id(mod.body), mod.body)
    assert isinstance(body, Call)
    used = {id(a) for c in topo_order(body) for a in c.args}
    # NOTE: run-time inputs stay even if unread (callers set them by name); parameters only if read
    keep = ([v for v in mod.params if v.name not in params or id(v) in used]
            + [v for v in folded if id(v) in used])
    return (Function(tuple(keep), body, mod.name),
            {v.name: new_params[v.name] for v in keep if v.name in new_params})


def _where_as_add(c: Call, args: tuple[Expr, ...], const: dict[int, np.ndarray]
                  ) -> tuple[Expr, np.ndarray] | None:
    """``(x, bias)`` with ``x + bias`` equal to the ``where`` call ``c`` (see the module doc),
    or None."""
    cond, *branches = args
    if id(cond) not in const:
        return None
    for k in (0, 1):
        fill, x = branches[k], branches[1 - k]
        if id(fill) not in const or id(x) in const or x.shape != c.shape:
            continue
        value = const[id(fill)]
        if value.size != 1 or not (np.isinf(value).all() or np.abs(value).min() >= HUGE):
            continue
        keep = (const[id(cond)] != 0) == (k == 1)
        return x, np.where(keep, 0, value.reshape(())).astype(c.dtype)
    return None
