"""AutoTVM templates inside networks: task extraction and template-based anchor kernels.

For each fused group whose anchor is a convolution or a dense layer, the x86 template library
offers several implementations (TVM's "strategies"): direct convolution with the kernel packed
once at build time, width-vectorized direct convolution, Winograd with pre-transformed weights,
packed dense. :func:`choose` picks, among those with a tuning record in the active dispatch
context (``apply_history_best`` logs, then the packaged reference logs), the one with the
lowest recorded cost; with no record it takes the packed direct implementation with its
fallback config. Pre-packing and Winograd transforms of constant weights happen once, in numpy,
when the network is built. The group's element-wise tail then runs as a second, small kernel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.autotvm.dispatcher import DispatchContext
from templtune.autotvm.task.task import args_to_workload

from .fuse import FusedGroup, partition
from .ir import Call, Function

logger = logging.getLogger("templtune.graph")

_MAX_BLOCK = 64


def _blocks(n: int) -> list[int]:
    """Register-block sizes worth packing for: multiples of 8 lanes (up to 64) dividing ``n``."""
    return [b for b in range(8, _MAX_BLOCK + 1, 8) if n % b == 0]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One implementation of an anchor op: a template, its arguments, and the numpy transform
    that turns the graph's weight into the layout the template takes (None: as is)."""

    name: str
    args: tuple[Any, ...]
    transform: Callable[[np.ndarray], np.ndarray] | None = None

    @property
    def workload(self) -> tuple[Any, ...]:
        return args_to_workload(self.args, self.name)


def _scalar(pair: tuple[int, ...]) -> Any:
    return pair[0] if len(set(pair)) == 1 else tuple(pair)


def _pack_conv(b: int) -> Callable[[np.ndarray], np.ndarray]:
    def f(k: np.ndarray) -> np.ndarray:
        co, ci, kh, kw = k.shape
        return np.ascontiguousarray(k.reshape(co // b, b, ci, kh, kw).transpose(0, 2, 3, 4, 1))
    return f


def _pack_dense(b: int) -> Callable[[np.ndarray], np.ndarray]:
    def f(w: np.ndarray) -> np.ndarray:
        n, k = w.shape
        return np.ascontiguousarray(w.reshape(n // b, b, k).transpose(0, 2, 1))
    return f


def _winograd(m: int, b: int) -> Callable[[np.ndarray], np.ndarray]:
    def f(k: np.ndarray) -> np.ndarray:
        from templtune.topi.nn.winograd import winograd_transform_matrices

        co, ci, kh, _ = k.shape
        _, _, g = winograd_transform_matrices(m, kh, "float32")
        u = np.einsum("ey,ocyx,ux->euco", g, k.astype(np.float64), g).astype(np.float32)
        al = u.shape[0]
        return np.ascontiguousarray(u.reshape(al, al, ci, co // b, b).transpose(0, 1, 3, 2, 4))
    return f


def candidates(call: Call) -> list[Candidate]:
    """The template implementations of ``call`` (empty when none applies), default first."""
    a = dict(call.attrs)
    if call.op == "nn.dense":
        (m, k), n = call.args[0].shape, call.shape[1]
        out = [Candidate("dense", (m, n, k, b), _pack_dense(b)) for b in _blocks(n)]
        return out + [Candidate("dense", (m, n, k))]
    if call.op != "nn.conv2d":
        return []
    if a["data_layout"] == "NHWC":
        if a["groups"] != 1:
            return []
        n, h, w, ci = call.args[0].shape
        kh, kw, _, co = call.args[1].shape
        return [Candidate("conv2d_nhwc", (n, h, w, co, ci, kh, kw, _scalar(a["strides"]),
                                          _scalar(a["padding"])))]
    n, ci, h, w = call.args[0].shape
    co, _, kh, kw = call.args[1].shape
    stride, pad = _scalar(a["strides"]), _scalar(a["padding"])
    if a["groups"] != 1:
        if co != ci:
            return []
        return [Candidate("depthwise_conv2d_nchw", (n, h, w, ci, 1, kh, kw, stride, pad))]
    base = (n, h, w, co, ci, kh, kw, stride, pad)
    blocks = _blocks(co)
    out = [Candidate("conv2d_nchw", (*base, b), _pack_conv(b)) for b in blocks]
    if kh == kw == 3 and a["strides"] == (1, 1):
        out += [Candidate("conv2d_winograd", (*base, m, b), _winograd(m, b))
                for m in (2, 4) for b in blocks]
    return out + [Candidate("conv2d_nchw_wvec", base), Candidate("conv2d_nchw", base)]


def choose(call: Call, target: Any, allow_transform: bool = True) -> Candidate | None:
    """The fastest recorded implementation of ``call``, else the packed direct default
    (only implementations taking the weight as is when not ``allow_transform``)."""
    cands = [c for c in candidates(call) if allow_transform or c.transform is None]
    if not cands:
        return None
    from templtune import templates

    templates.load("x86")  # records are decoded against the registered templates
    ctx = DispatchContext.current
    best, best_cost = None, float("inf")
    for c in cands:
        cost = ctx.query_cost(target, c.workload)
        if cost is not None and cost < best_cost:
            best, best_cost = c, cost
    if best is not None:
        return best
    plain = cands[-1]
    if plain.name in ("conv2d_nchw", "dense"):
        # NOTE: no record: pack with the block the plain workload's fallback config would use.
        cfg = _fallback_block(plain, target)
        for c in cands:
            if c.name == plain.name and len(c.args) == len(plain.args) + 1 and c.args[-1] == cfg:
                return c
    return plain


def _fallback_block(plain: Candidate, target: Any) -> int:
    """The register block (``tile_oc`` / ``tile_x`` inner size) of the plain workload's config
    (instantiating the template fills a fallback config's knobs)."""
    from templtune.autotvm import env

    # NOTE: a probe: the fallback warning belongs to the workload that will actually run.
    with env.scope(silent=True):
        instantiate(plain, target)
        with target:
            cfg = DispatchContext.current.query(target, plain.workload)
    knob = "tile_oc" if plain.name == "conv2d_nchw" else "tile_x"
    return int(cfg[knob].size[-1])


def instantiate(cand: Candidate, target: Any) -> tuple[Any, list[Any]]:
    """``(schedule, [data, weight, out])`` of a candidate under the active dispatch context."""
    import importlib

    module = importlib.import_module(f"templtune.templates.x86.{cand.name}")
    with target:
        return getattr(module, cand.name)(*cand.args)


def extract_from_program(mod: Function, params: Any, target: Any, target_host: Any = None,
                         ops: Any = None) -> list[Any]:
    """AutoTVM tasks of a network's anchor ops (TVM's ``autotvm.task.extract_from_program``).

    One task per distinct workload of the implementation :func:`choose` would pick now (the
    recorded-fastest one, else the packed direct template), in first-seen order. ``ops``
    restricts the anchors by graph op name (e.g. ``["nn.conv2d"]``).
    """
    from templtune.autotvm.task.task import create
    from templtune.target import Target

    tgt = Target(target) if isinstance(target, str) else target
    wanted = None if ops is None else {getattr(o, "name", o) for o in ops}
    tasks, seen = [], set()
    groups: list[FusedGroup] = partition(mod)
    for g in groups:
        anchor = g.calls[0]
        if wanted is not None and anchor.op not in wanted:
            continue
        cand = choose(anchor, tgt)
        if cand is None or cand.workload in seen:
            continue
        seen.add(cand.workload)
        tasks.append(create(cand.name, cand.args, tgt))
    return tasks
