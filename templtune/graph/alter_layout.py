"""``AlterOpLayout`` for x86: NCHW[x]c through the network (TVM's alter-layout + NCHWc path).

Every float32 NCHW convolution (grouped or not, but not depthwise; constant weight) becomes
``nn.contrib_conv2d_NCHWc`` with the channel blocks ``ic_bn``/``oc_bn`` of its AutoTVM config
(``tile_ic``/``tile_oc`` of the ``conv2d_NCHWc`` task's tuned record, the graph tuner's choice
under ``apply_graph_best``, else the template's fallback). Activations stay blocked between layers
wherever an op has a blocked form (element-wise ops, squeeze-excitation products,
concatenation, depthwise convolutions, pooling ...: :mod:`.alter_rewrite`, which also packs
weights, biases and per-channel constants once, in numpy, as new bound parameters);
``layout_transform`` is inserted only where two blockings meet and where an op needs plain NCHW
(the network's input and output, ops without a blocked form).

With tuning records the choice is made for the whole network (:func:`choose_layouts`): each
convolution's options are the ``conv2d_NCHWc`` task's fastest record per blocking, another
blocked implementation (``conv2d_NCHWc_winograd``) whose record beats them, and its NCHW
implementation's record; the options minimising the records' seconds plus the layout transforms
where two choices meet (estimated from their bytes) win. A convolution without a blocked
record but with a plain one stays NCHW: a tuned kernel is not traded for an untuned blocked one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.autotvm import strategy
from templtune.autotvm.dispatcher import ApplyGraphBest, DispatchContext
from templtune.autotvm.strategy import Implementation, OpCall
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.target import Target
from templtune.topi.nn.conv2d import group_blocks_ok

from .alter_rewrite import Rewriter, is_blockable_depthwise
from .ir import Call, Function, Var, readers
from .op import is_depthwise

logger = logging.getLogger("templtune.graph")

__all__ = ["NCHWC_OP", "BLOCKS", "LayerChoice", "nchwc_implementation", "blockable_convs",
           "other_blocked", "choose_layouts", "config_blocks",
           "is_blockable_depthwise", "alter_op_layout"]

NCHWC_OP = "nn.contrib_conv2d_NCHWc"
#: channel blocks (equal in and out) at which other blocked implementations (Winograd) are
#: looked up: a record at another blocking is not used
BLOCKS = (32, 16, 64)
#: the throughput of a layout transform (read and write), an order-of-magnitude figure of the
#: default schedule's in a network
_TRANSFORM_BYTES_PER_S = 5e9


@dataclass(frozen=True, slots=True)
class LayerChoice:
    """The blocking of one convolution: its config and the blocks it implies."""

    config: Any
    ic_bn: int
    oc_bn: int


def _as_opcall(call: Call, op: str) -> OpCall:
    return OpCall(op, tuple(a.shape for a in call.args), call.dtype, call.shape, call.attrs)


def nchwc_implementation(conv: Call, target: Any) -> Implementation | None:
    """The ``conv2d_NCHWc`` implementation of an NCHW convolution (None: none registered)."""
    impls = strategy.implementations(_as_opcall(conv, NCHWC_OP), target)
    return impls[0] if impls else None


def blockable_convs(func: Function, params: Any, target: Any) -> list[Call]:
    """The convolutions the pass can block, in the order it visits (and queries) them."""
    bound = set(params or ())
    out = []
    for c in func.calls():
        if (c.op == "nn.conv2d" and c.dtype == "float32" and c.attr("data_layout") == "NCHW"
                and not is_depthwise(c.attr("groups"), c.args[0].shape[1], c.shape[1])
                and isinstance(c.args[1], Var)
                and c.args[1].name in bound and nchwc_implementation(c, target) is not None):
            out.append(c)
    return out


def config_blocks(cfg: Any) -> tuple[int, int]:
    """``(ic_bn, oc_bn)``: the inner sizes of a ``conv2d_NCHWc`` config's ``tile_ic`` and
    ``tile_oc``."""
    return int(cfg["tile_ic"].size[-1]), int(cfg["tile_oc"].size[-1])


def blocks_of(impl: Implementation, config: Any, target: Any) -> tuple[Any, int, int]:
    """``(config, ic_bn, oc_bn)``: the template run once under ``config`` (a fallback config
    is filled in by it), its blocks read back; a config the template refuses (a record of an
    older version of it) gives way to the fallback config."""
    try:
        strategy.instantiate(impl, target, config=config)
    except ValueError as exc:
        if config.is_fallback:
            raise
        logger.warning("record for %s unusable (%s); using a fallback configuration",
                       impl.workload, exc)
        config = FallbackConfigEntity()
        strategy.instantiate(impl, target, config=config)
    return (config, *config_blocks(config))


def _blocked_call(conv: Call, ic_bn: int, oc_bn: int) -> OpCall:
    """``conv`` as an ``NCHWC_OP`` call on ``NCHW{ic_bn}c`` data and an
    ``OIHW{ic_bn}i{oc_bn}o`` kernel."""
    (n, ci, h, w), (co, _, kh, kw) = conv.args[0].shape, conv.args[1].shape
    return OpCall(NCHWC_OP, ((n, ci // ic_bn, h, w, ic_bn),
                             (co // oc_bn, ci // ic_bn, kh, kw, ic_bn, oc_bn)),
                  conv.dtype, conv.shape, conv.attrs)


def other_blocked(conv: Call, target: Any, blocks: tuple[int, ...] = BLOCKS,
                  direct: Implementation | None = None) -> list[tuple[int, Implementation]]:
    """``(block, implementation)`` of every blocked implementation of ``conv`` other than the
    direct ``conv2d_NCHWc`` (``direct``, looked up when not given), at each of ``blocks``
    (equal in and out) that divides its channels."""
    (_, ci, _, _), (co, _, _, _) = conv.args[0].shape, conv.args[1].shape
    direct = direct or nchwc_implementation(conv, target)
    return [(b, impl) for b in blocks if not (ci % b or co % b)
            for impl in strategy.implementations(_blocked_call(conv, b, b), target)
            if direct is None or impl.template != direct.template]


@dataclass(frozen=True, slots=True)
class _Option:
    """One way to run a convolution: its choice (None: plain NCHW), the blocks of its input
    and output (0: plain) and its record's seconds (0 when it has none)."""

    choice: LayerChoice | None
    ic_bn: int
    oc_bn: int
    cost: float


def _options(conv: Call, target: Target) -> list[_Option]:
    """The ways ``conv`` can run that have records: the direct template's fastest record per
    blocking, every other blocked implementation (Winograd) whose record beats the direct
    one's best, and plain NCHW; the fallback blocking alone when none has a record."""
    impl = nchwc_implementation(conv, target)
    assert impl is not None
    ctx = DispatchContext.current
    if isinstance(ctx, ApplyGraphBest):
        cfg, ic_bn, oc_bn = blocks_of(impl, ctx.query(target, impl.workload), target)
        return [_Option(LayerChoice(cfg, ic_bn, oc_bn), ic_bn, oc_bn, 0.0)]
    opts: dict[tuple[int, int], _Option] = {}
    (_, ci, _, _), co, groups = conv.args[0].shape, conv.shape[1], int(conv.attr("groups", 1))
    for cfg, c in ctx.query_candidates(target, impl.workload):
        ic_bn, oc_bn = config_blocks(cfg)
        if not group_blocks_ok(groups, ci, co, ic_bn, oc_bn):
            # NOTE: a record of an older template whose merged groups' blocks the kernel
            # packing no longer takes
            logger.debug("record blocks (%d, %d) of %s unusable", ic_bn, oc_bn, impl.workload)
            continue
        if (ic_bn, oc_bn) not in opts:
            opts[(ic_bn, oc_bn)] = _Option(LayerChoice(cfg, ic_bn, oc_bn), ic_bn, oc_bn, c)
    best = min((o.cost for o in opts.values()), default=None)
    out = list(opts.values())
    for b, other in other_blocked(conv, target, direct=impl):
        oc = ctx.query_cost(target, other.workload)
        # NOTE: no config: the build's record lookup picks the fastest implementation, so
        # this one only where it beats every direct record
        if oc is not None and (best is None or oc < best):
            out.append(_Option(LayerChoice(None, b, b), b, b, oc))
    plain = strategy.select(_as_opcall(conv, conv.op), target)
    plain_cost = None if plain is None else ctx.query_cost(target, plain.workload)
    if plain_cost is not None:
        out.append(_Option(None, 0, 0, plain_cost))
    if best is None and not any(o.choice is not None for o in out):
        # NOTE: no blocked record: the fallback config's blocking, or plain NCHW when that
        # one is tuned (a tuned kernel is not traded for an untuned blocked one)
        if plain_cost is not None:
            return [_Option(None, 0, 0, plain_cost)]
        cfg, ic_bn, oc_bn = blocks_of(impl, ctx.query(target, impl.workload), target)
        return [_Option(_untuned(conv, target, impl, cfg, ic_bn, oc_bn), ic_bn, oc_bn, 0.0)]
    return out


def _untuned(conv: Call, target: Target, direct: Implementation, cfg: Any, ic_bn: int,
             oc_bn: int) -> LayerChoice:
    """The choice for a convolution no implementation has a record for: the direct template's
    fallback blocking, run by the direct fallback config, or with no config where another
    blocked implementation's fallback ranks above it at that blocking (Winograd on larger
    images; the build's record lookup then falls back to it)."""
    (_, ci, _, _), (co, _, _, _) = conv.args[0].shape, conv.args[1].shape
    if not (ci % ic_bn or co % oc_bn):
        other = strategy.select(_blocked_call(conv, ic_bn, oc_bn), target)
        if other is not None and other.template != direct.template:
            return LayerChoice(None, ic_bn, oc_bn)
    return LayerChoice(cfg, ic_bn, oc_bn)


def _estimated_transform(shape: tuple[int, ...], src: str, dst: str) -> float:
    """Seconds of a ``layout_transform`` of an NCHW ``shape`` tensor, from its bytes (read and
    written)."""
    return 0.0 if src == dst else 2 * 4 * int(np.prod(shape)) / _TRANSFORM_BYTES_PER_S


def choose_layouts(func: Function, params: Any, target: Target
                   ) -> dict[int, LayerChoice | None]:
    """Each blockable convolution's choice (by ``id``), minimising the records' seconds plus
    the estimated layout transforms where two choices meet (the graph tuner's problem, solved
    with :func:`_estimated_transform` in place of measured transforms)."""
    from templtune.autotvm.graph_tuner.base import GraphTunerError, LayoutGraph
    from templtune.autotvm.graph_tuner.dp import solve_dp
    from templtune.autotvm.graph_tuner.pbqp import solve_pbqp

    convs = blockable_convs(func, params, target)
    opts = [_options(c, target) for c in convs]
    if all(len(o) == 1 for o in opts):
        return {id(c): o[0].choice for c, o in zip(convs, opts)}
    unary, edges = LayoutGraph(func, convs, set(params or ())).problem(opts, _estimated_transform)
    try:
        pick = solve_dp(unary, edges)
    except GraphTunerError:  # a graph whose elimination tables are too large
        pick = solve_pbqp(unary, edges)
    return {id(c): o[k].choice for c, o, k in zip(convs, opts, pick)}


def alter_op_layout(func: Function, params: dict[str, np.ndarray], target: Any
                    ) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` with NCHW[x]c convolutions and blocked activations (see the
    module docstring); the original network when no convolution is blocked.

    Parameters
    ----------
    func : Function
    params : dict of str to ndarray
        The bound parameters; packed weights are added under new names.
    target : Target or str
    """
    tgt = Target(target) if isinstance(target, str) else target
    choices = choose_layouts(func, params, tgt)
    if not any(v is not None for v in choices.values()):
        return func, params
    calls = func.calls()
    rw = Rewriter(params, choices, readers(calls), tgt.capabilities.lanes("float32"))
    for c in calls:
        rw.new[id(c)] = rw.rewrite(c)
    body = rw.as_block(func.body, 0)
    assert isinstance(body, Call)
    used: dict[int, Var] = {}
    from .ir import topo_order

    for c in topo_order(body):
        for a in c.args:
            if isinstance(a, Var):
                used.setdefault(id(a), a)
    inputs = [v for v in func.params if v.name not in params]
    new_params = inputs + [v for v in used.values() if v.name in rw.params
                           and all(v is not i for i in inputs)]
    kept = {v.name: rw.params[v.name] for v in new_params if v.name in rw.params}
    logger.info("AlterOpLayout: %d of %d convolutions blocked, %d layout transforms",
                sum(v is not None for v in choices.values()), len(choices), rw.n_transforms)
    return Function(tuple(new_params), body, func.name), kept
