"""The graph tuner's problem: one layout choice per convolution, costs on nodes and edges.

Each ``nn.conv2d`` the alter-layout pass would block is a node; its candidates are the
fastest tuning record of the ``conv2d_NCHWc`` task per channel blocking ``(ic_bn, oc_bn)``
(at most ``max_sch_num``), costing its measured time. Where two blockings meet, the measured
time of the ``layout_transform`` between them is charged: on the edge from the producing
convolution to the consuming one (through the ops the alter-layout pass keeps blocked:
element-wise ops, pools, depthwise convolutions, an unfolded batch norm, per-channel scales,
channel concatenations), on the edge between the producers of a residual ``add`` or of a
concatenation's inputs, and on a node whose input comes plain (the network input) or whose
output must go back to NCHW.
:class:`~.dp.DPTuner` and :class:`~.pbqp.PBQPTuner` minimise the sum.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from templtune.autotvm.dispatcher import iter_records
from templtune.autotvm.record import encode, usable_cost
from templtune.errors import TempltuneError
from templtune.graph.alter_layout import (
    blockable_convs,
    config_blocks,
    is_blockable_depthwise,
    nchwc_implementation,
)
from templtune.graph.alter_rewrite import BROADCAST, ELEMENTWISE
from templtune.graph.ir import Call, Expr, Function
from templtune.graph.ops.nchwc import blocked
from templtune.target import Target

logger = logging.getLogger("autotvm")

__all__ = ["GraphTunerError", "Candidate", "Edge", "LayoutGraph", "BaseGraphTuner"]

_PASS = ("nn.relu", "clip", "nn.bias_add", "nn.max_pool2d", "nn.avg_pool2d",
         "nn.global_avg_pool2d")


class GraphTunerError(TempltuneError, ValueError):
    """A graph the tuner cannot set up (no records for a convolution, an unsupported op)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One layout choice of a node: its record and the blocks it implies."""

    ic_bn: int
    oc_bn: int
    cost: float
    record: tuple[Any, Any]


@dataclass(slots=True)
class Edge:
    """Pairwise costs between two nodes: ``cost[i, j]`` for candidates ``i`` of ``u``, ``j``
    of ``v``."""

    u: int
    v: int
    cost: np.ndarray = field(repr=False)


class LayoutGraph:
    """Where layouts meet in ``graph``: ``nodes`` are its blockable convolutions (in the order
    the alter-layout pass visits them), ``bound`` the names of its weights. :meth:`problem`
    prices a candidate list per node as unary costs and pairwise edges; the alter-layout pass
    solves the same problem with estimated transform costs."""

    def __init__(self, graph: Function, nodes: Sequence[Call], bound: set[str]) -> None:
        self._graph, self._bound = graph, bound
        self._index = {id(c): k for k, c in enumerate(nodes)}

    def source(self, e: Expr) -> int | None:
        """The node whose output layout ``e`` carries (None: plain NCHW), following the
        alter-layout pass: layout-keeping ops pass it on, a broadcasting binary or a channel
        concatenation takes its first blocked operand's."""
        while isinstance(e, Call):
            if id(e) in self._index:
                return self._index[id(e)]
            joined = self.joined(e)
            if joined:
                return next((p for p in map(self.source, joined) if p is not None), None)
            if not self.keeps(e):
                return None
            e = e.args[0]
        return None

    def keeps(self, c: Call) -> bool:
        """Whether ``c`` runs in its input's blocking (element-wise, pools, depthwise, an
        unfolded batch norm)."""
        return (c.op in _PASS or c.op in ELEMENTWISE or is_blockable_depthwise(c, self._bound)
                or (c.op == "nn.batch_norm" and all(getattr(a, "name", None) in self._bound
                                                   for a in c.args[1:])))

    @staticmethod
    def joined(c: Call) -> tuple[Expr, ...]:
        """The operands whose blockings meet in ``c``: the full-shape operands of a
        broadcasting binary whose other operand keeps the channel axis whole (a residual
        ``add``, a squeeze-excitation scale, a per-channel constant), every input of a
        channel concatenation."""
        if c.op in BROADCAST and len(c.args) == 2 and len(c.shape) == 4:
            full = tuple(a for a in c.args if a.shape == c.shape)
            rest = [(1,) * (4 - len(a.shape)) + tuple(a.shape) for a in c.args
                    if a.shape != c.shape]
            if full and all(len(r) == 4 and r[1] in (1, c.shape[1])
                            and all(d in (1, o) for d, o in zip(r, c.shape)) for r in rest):
                return full
        if c.op == "concatenate" and len(c.shape) == 4 and int(c.attr("axis")) % 4 == 1:
            return c.args
        return ()

    def problem(self, cands: Sequence[Sequence[Any]], cost_of: Any
                ) -> tuple[list[np.ndarray], list[Edge]]:
        """Unary cost vectors and pairwise edges of ``cands`` (per node, objects with
        ``ic_bn``, ``oc_bn`` and ``cost``; a block 0 is plain NCHW); ``cost_of(shape, src,
        dst)`` prices one transform (``shape`` in NCHW)."""
        unary = [np.array([c.cost for c in cs]) for cs in cands]
        edges: list[Edge] = []

        def pair(u: int, v: int, shape: tuple[int, ...], ub: str, vb: str) -> None:
            m = np.array([[0.0 if getattr(a, ub) == getattr(b, vb)
                           else cost_of(shape, blocked(getattr(a, ub)), blocked(getattr(b, vb)))
                           for b in cands[v]] for a in cands[u]])
            edges.append(Edge(u, v, m))

        plain_consumer: set[tuple[int, int]] = set()
        for c in self._graph.calls():
            if id(c) in self._index:
                q = self._index[id(c)]
                p = self.source(c.args[0])
                shape = c.args[0].shape
                if p is None:
                    unary[q] = unary[q] + [cost_of(shape, "NCHW", blocked(x.ic_bn))
                                           for x in cands[q]]
                elif p != q:
                    pair(p, q, shape, "oc_bn", "ic_bn")
            elif joined := self.joined(c):
                # NOTE: the first blocked operand's blocking wins; the others are re-laid
                srcs = [(self.source(a), a) for a in joined]
                first = next((p for p, _ in srcs if p is not None), None)
                for p, a in srcs:
                    if first is None or p == first:
                        continue
                    if p is None:
                        unary[first] = unary[first] + [cost_of(a.shape, "NCHW", blocked(x.oc_bn))
                                                       for x in cands[first]]
                    else:
                        pair(first, p, a.shape, "oc_bn", "oc_bn")
            elif not self.keeps(c) and not (c.op == "nn.batch_flatten"
                                            and c.args[0].shape[2:] == (1, 1)):
                for arg in c.args:
                    p = self.source(arg)
                    if p is not None and (p, id(arg)) not in plain_consumer:
                        plain_consumer.add((p, id(arg)))
                        unary[p] = unary[p] + [cost_of(arg.shape, blocked(x.oc_bn), "NCHW")
                                               for x in cands[p]]
        if self.source(self._graph.body) is not None:
            p = self.source(self._graph.body)
            assert p is not None
            unary[p] = unary[p] + [cost_of(self._graph.body.shape, blocked(x.oc_bn), "NCHW")
                                   for x in cands[p]]
        return unary, edges


class BaseGraphTuner:
    """Set up the layout-selection problem of ``graph`` (TVM's ``BaseGraphTuner``).

    Parameters
    ----------
    graph : Function
        The network (``mod["main"]``).
    input_shapes : dict of str to tuple
        The network's run-time inputs; every other variable counts as a bound weight.
    records : path or iterable of (MeasureInput, MeasureResult)
        Tuning records of the ``conv2d_NCHWc`` tasks.
    target_ops : sequence
        The ops to tune (``[relay.op.get("nn.conv2d")]`` or names); only ``nn.conv2d``.
    target : str or Target
    max_sch_num : int
        Candidates kept per node (the fastest record per blocking, fastest blockings first).
    """

    def __init__(self, graph: Function, input_shapes: dict[str, Any], records: Any,
                 target_ops: Sequence[Any], target: Any, max_sch_num: int = 20,
                 dtype: str = "float32", verbose: bool = True,
                 log_file: str = "graph_tuner.log", log_level: int = logging.DEBUG,
                 name: str = "graph_tuner") -> None:
        if not isinstance(graph, Function):
            raise GraphTunerError(f"the graph tuner takes a network Function, got "
                                  f"{type(graph).__name__}")
        names = {getattr(o, "name", o) for o in target_ops}
        if names - {"nn.conv2d"}:
            raise GraphTunerError(f"the graph tuner chooses layouts of nn.conv2d only, got "
                                  f"{sorted(names)}")
        self._graph, self._target = graph, Target(target) if isinstance(target, str) else target
        self._input_shapes = dict(input_shapes)
        self._max_sch_num, self._verbose, self._name = max_sch_num, verbose, name
        bound = [v.name for v in graph.params if v.name not in self._input_shapes]
        self._bound = set(bound)
        self._nodes: list[Call] = blockable_convs(graph, bound, self._target)
        self._layout = LayoutGraph(graph, self._nodes, self._bound)
        self._candidates = self._load(records)
        self._transform_costs: dict[tuple[tuple[int, ...], str, str], float] = {}
        self._choice: list[int] | None = None

    # -- set-up
    def _load(self, records: Any) -> list[list[Candidate]]:
        want = {nchwc_implementation(c, self._target).workload: k  # type: ignore[union-attr]
                for k, c in enumerate(self._nodes)}
        best: dict[tuple[Any, int, int], Candidate] = {}
        keys = set(self._target.keys)
        for inp, res in iter_records(records):
            wkl = inp.task.workload
            cost = usable_cost(res)
            if wkl not in want or cost is None or not keys & set(inp.target.keys):
                continue
            ic, oc = config_blocks(inp.config)
            key = (wkl, ic, oc)
            if key not in best or cost < best[key].cost:
                best[key] = Candidate(ic, oc, cost, (inp, res))
        out: list[list[Candidate]] = []
        missing = []
        for c in self._nodes:
            wkl = nchwc_implementation(c, self._target).workload  # type: ignore[union-attr]
            cands = sorted((v for k, v in best.items() if k[0] == wkl), key=lambda v: v.cost)
            if not cands:
                missing.append(wkl)
            out.append(cands[: self._max_sch_num])
        if missing:
            raise GraphTunerError(f"no usable conv2d_NCHWc record for {len(missing)} "
                                  f"convolutions, e.g. {missing[0]!r}; tune their tasks first")
        return out

    # -- layout transform costs
    def needed_layout_transforms(self) -> set[tuple[tuple[int, ...], str, str]]:
        """Every ``(NCHW shape, source layout, destination layout)`` some choice needs."""
        need: set[tuple[tuple[int, ...], str, str]] = set()

        def note(shape: tuple[int, ...], src: str, dst: str) -> float:
            need.add((tuple(shape), src, dst))
            return 0.0

        self._layout.problem(self._candidates, note)
        return need

    def benchmark_layout_transform(self, min_exec_num: int = 100, timeout: int = 10,
                                   use_rpc: bool = False, device_key: Any = None,
                                   host: str = "127.0.0.1", port: int = 9190,
                                   n_parallel: int = 1, build_func: str = "default",
                                   layout_records: Any = None, target_host: Any = None,
                                   infer_layout: bool = False, runner: Any = None) -> None:
        """Measure every ``layout_transform`` the choices can need (seconds per call, the
        median of rounds of at least ``min_exec_num`` calls). ``infer_layout=True`` measures one
        shape per (source, destination) layout pair and scales by the element count.
        ``layout_records`` (a dict of ``(shape, src, dst) -> seconds``) skips measuring
        those."""
        if use_rpc:
            raise GraphTunerError("layout transforms are measured locally (use_rpc=False)")
        from .transform_cost import measure_transform

        given = dict(layout_records or {})
        need = sorted(self.needed_layout_transforms())
        by_pair: dict[tuple[str, str], tuple[tuple[int, ...], float]] = {}
        for shape, src, dst in need:
            key = (shape, src, dst)
            if key in given:
                self._transform_costs[key] = float(given[key])
                continue
            if infer_layout and (src, dst) in by_pair:
                ref_shape, ref_cost = by_pair[(src, dst)]
                self._transform_costs[key] = ref_cost * math.prod(shape) / math.prod(ref_shape)
                continue
            cost = measure_transform(shape, src, dst, self._target, min_exec_num)
            self._transform_costs[key] = cost
            by_pair[(src, dst)] = (shape, cost)
        if self._verbose:
            logger.info("%s: measured %d layout transforms", self._name, len(need))

    def _cost_of(self, shape: tuple[int, ...], src: str, dst: str) -> float:
        key = (tuple(shape), src, dst)
        if key not in self._transform_costs:
            raise GraphTunerError(f"layout transform {src} -> {dst} of {shape} was not "
                                  f"measured; call benchmark_layout_transform() first")
        return self._transform_costs[key]

    # -- results
    def run(self, **kwargs: Any) -> None:
        """Choose a candidate per node (the subclass's solver)."""
        unary, edges = self._layout.problem(self._candidates, self._cost_of)
        self._choice = self._solve(unary, edges)
        total = self.total_cost(self._choice)
        if self._verbose:
            logger.info("%s: %d convolutions, estimated %.3f ms with layout transforms",
                        self._name, len(self._nodes), total * 1e3)

    def _solve(self, unary: list[np.ndarray], edges: list[Edge]) -> list[int]:
        raise NotImplementedError

    def total_cost(self, choice: Sequence[int]) -> float:
        """Kernel plus layout-transform seconds of ``choice`` (one candidate index per node)."""
        unary, edges = self._layout.problem(self._candidates, self._cost_of)
        return float(sum(u[c] for u, c in zip(unary, choice))
                     + sum(e.cost[choice[e.u], choice[e.v]] for e in edges))

    @property
    def candidates(self) -> list[list[Candidate]]:
        return self._candidates

    def get_optimal_records(self) -> list[tuple[Any, Any]]:
        """The chosen record of each node, in the order ``relay.build`` visits them."""
        if self._choice is None:
            raise GraphTunerError("call run() before asking for the optimal records")
        return [cs[k].record for cs, k in zip(self._candidates, self._choice)]

    def write_opt_sch2record_file(self, record_file: str | os.PathLike[str]
                                  = "graph_opt_schedule.log") -> None:
        """Write the chosen records (JSON lines) for :func:`autotvm.apply_graph_best`."""
        with open(record_file, "w") as f:
            for inp, res in self.get_optimal_records():
                f.write(encode(inp, res) + "\n")
