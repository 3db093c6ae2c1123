"""Per-store feature rows of a lowered loop nest (Ansor's program features, templtune's layout).

Every ``Store`` statement of the nest (vectorized and unrolled loops still loops, as
:func:`.feature.lower_state` leaves them) gives one row of :func:`get_per_store_feature_names`
values, in program order; the cost model scores a state by the sum of its rows' predictions.

Row layout (``max_n_bufs`` buffers, 5 by default: ``39 + 18 * max_n_bufs + 17`` values)

* **compute** (13): executed operations of the statement by category (float add/sub, mul,
  div/mod, min/max/compare, math calls, other calls; the same for ints; boolean ops; selects),
  each = static count x lanes x product of the loop extents around it;
* **annotations** (6 each for ``vec``, ``unroll``, ``parallel``): number of such loops, product
  and innermost extent, whether the store's innermost / outermost loop is one, and how many
  loops lie inside the innermost one. ``unroll`` counts explicit unrolls and the loops that the
  ``auto_unroll_max_step`` pragma unrolls; ``parallel`` includes GPU thread bindings;
* **gpu** (8): is_gpu, blockIdx.x/y/z, threadIdx.x/y/z and vthread extents;
* **buffers** (18 each; the ``max_n_bufs`` largest by (lines, bytes), zero-padded): access type
  one-hot (read / write / read-write); bytes (executed accesses x element size); unique bytes
  (footprint); lines (64-byte cache lines fetched, counting consecutive hits once); unique
  lines; reuse type one-hot (loop re-read / serial read-write by another statement / none);
  reuse distance in iterations and in bytes (what all buffers of the statement touch within
  it); reuse count; bytes, unique bytes, lines and unique lines per reuse; stride (elements per
  iteration of the innermost loop that moves the address);
* **arithmetic intensity** (10): float ops / footprint bytes at each loop level, sampled at 10
  evenly spaced points of log2(ops);
* **allocation** (4): size in bytes of the stored buffer when it is allocated in the function,
  size x loops around the allocation, loops around the allocation, loops inside it;
* **outer** (3): product of all loop extents, number of loops, auto_unroll_max_step.

Values are ``sign(x) * log2(|x| + 1)`` except the one-hots and flags. Deviations from TVM:
no ``float_mad``/``int_mad`` columns (always 0 there), annotation *positions* are real flags
(TVM v0.18 always writes "mixed"), index footprints understand the ``floordiv``/``floormod``
of fused loops, the ``if (likely(...))`` guards of non-dividing splits narrow their loops, and
a thread tag bound again inside its own loop (cooperative fetches) counts once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from templtune import dtype as dt

from .feature_walk import OP_NAMES, Access, StoreInfo, walk

DEFAULT_MAX_N_BUFS = 5
CACHE_LINE = 64
_ANN_GROUPS = ("vec", "unroll", "parallel")
_ANN_FIELDS = ("num", "prod", "len", "inner", "outer", "depth")
_GPU_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
             "threadIdx.z", "vthread")
_PARALLEL_KINDS = frozenset(("parallel",) + _GPU_TAGS)
_BUF_FIELDS = ("acc_type.read", "acc_type.write", "acc_type.rw", "bytes", "unique_bytes",
               "lines", "unique_lines", "reuse_type.loop", "reuse_type.serial",
               "reuse_type.none", "reuse_dis_iter", "reuse_dis_bytes", "reuse_ct",
               "bytes_d_reuse_ct", "unique_bytes_d_reuse_ct", "lines_d_reuse_ct",
               "unique_lines_d_reuse_ct", "stride")
_N_AI = 10
_TAIL = ("alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod",
         "outer_prod", "num_loops", "auto_unroll_max_step")


def get_per_store_feature_names(max_n_bufs: int | None = None) -> list[str]:
    """Names of the values of one per-store row (see the module docstring)."""
    n_bufs = DEFAULT_MAX_N_BUFS if max_n_bufs is None else int(max_n_bufs)
    names = list(OP_NAMES)
    names += [f"{g}_{f}" for g in _ANN_GROUPS for f in _ANN_FIELDS]
    names += ["is_gpu"] + [f"{t.replace('.', '_')}_len" for t in _GPU_TAGS]
    names += [f"B{k}.{f}" for k in range(n_bufs) for f in _BUF_FIELDS]
    names += [f"ai_curve_{k}" for k in range(_N_AI)]
    names += list(_TAIL)
    return names


def _log_mask(names: list[str]) -> np.ndarray:
    """True where a value is log-scaled (everything but one-hots and flags)."""
    return np.array([not (n.endswith(("_inner", "_outer")) or n == "is_gpu"
                          or ".acc_type." in n or ".reuse_type." in n) for n in names])


_MASKS: dict[int, np.ndarray] = {}


def _mask(n_bufs: int) -> np.ndarray:
    m = _MASKS.get(n_bufs)
    if m is None:
        m = _MASKS[n_bufs] = _log_mask(get_per_store_feature_names(n_bufs))
    return m


# ----------------------------------------------------------------------------- buffer geometry
def _shape(buf: Any) -> tuple[int, ...]:
    out = []
    for d in buf.shape:
        v = getattr(d, "value", d)
        out.append(int(v) if isinstance(v, (int, np.integer)) else 1 << 30)
    return tuple(out) or (1,)


class _Geom:
    """Row-major strides of a buffer, to split a flat coefficient into (dimension, step)."""

    __slots__ = ("sizes", "strides", "total", "eb")

    def __init__(self, buf: Any) -> None:
        self.sizes = _shape(buf)
        st, acc = [], 1
        for s in reversed(self.sizes):
            st.append(acc)
            acc *= s
        self.strides = tuple(reversed(st))
        self.total = acc
        self.eb = dt.itemsize(buf.dtype)

    def dim_of(self, c: int) -> tuple[int, int]:
        c = abs(c)
        for d, s in enumerate(self.strides):
            if c % s == 0:
                return d, c // s
        return len(self.strides) - 1, c


def _atom_extent(atom: tuple, ext: int) -> int:
    _, d, m = atom
    n = -(-ext // d)
    return min(n, m) if m else n


def _footprints(acc: Access, geo: _Geom, loops: Sequence[Any]) -> list[tuple[float, float]]:
    """``(distinct elements, distinct 64-byte lines)`` that ``acc`` touches at every loop
    level ``l`` (``loops[l:]`` run, the outer ones stay fixed), for ``l = 0 .. len(loops)``."""
    nd = len(geo.sizes)
    by_var: dict[Any, list[tuple[tuple, int, int]]] = {}
    for atom, c in acc.coeffs:
        d, cd = geo.dim_of(c)
        by_var.setdefault(atom[0], []).append((atom, d, cd))
    span = [1] * nd
    prod = [1] * nd
    nl = 1
    max_lines = math.ceil(geo.total * geo.eb / CACHE_LINE)
    out = [(1.0, 1.0)]
    for k in range(len(loops) - 1, -1, -1):
        lp = loops[k]
        if lp.var not in by_var and lp.var not in acc.nonlinear:
            out.append(out[-1])  # the access does not move along this loop
            continue
        for atom, d, cd in by_var.get(lp.var, ()):
            n = _atom_extent(atom, lp.extent)
            if n > 1:
                span[d] += cd * (n - 1)
                prod[d] *= n
        if lp.var in acc.nonlinear:
            nl *= lp.extent
        distinct = [min(span[d], prod[d], geo.sizes[d]) for d in range(nd)]
        # NOTE: trailing dimensions covered completely are contiguous with the one before
        # them; cache lines are counted over that contiguous run.
        j, tail = nd - 1, 1
        while j > 0 and distinct[j] == geo.sizes[j]:
            tail *= geo.sizes[j]
            j -= 1
        run_lines = min(float(distinct[j] * tail),
                        math.ceil(min(span[j], geo.sizes[j]) * tail * geo.eb / CACHE_LINE))
        elems = min(float(math.prod(distinct)) * nl, float(geo.total))
        lines = min(float(math.prod(distinct[:j])) * run_lines * nl, max_lines)
        out.append((elems, max(lines, 1.0)))
    return out[::-1]


def _access_vars(acc: Access) -> set:
    return {a[0] for a, _ in acc.coeffs} | set(acc.nonlinear)


def _unit_coeff(acc: Access, var: Any) -> int | None:
    """The coefficient of ``var`` when it enters the index only as ``c * var``."""
    if var in acc.nonlinear:
        return None
    found = [(a, c) for a, c in acc.coeffs if a[0] is var]
    if len(found) != 1 or found[0][0][1] != 1 or found[0][0][2]:
        return None
    return abs(found[0][1])


def _lines_and_stride(acc: Access, geo: _Geom, loops: Sequence[Any]) -> tuple[float, float]:
    """Cache lines fetched over the whole nest when a line stays hot only across consecutive
    iterations, and the element stride of the innermost loop that moves the address.

    Consecutive loops that continue each other's addresses (``c_outer == span of the inner
    ones``, e.g. a split loop) form one run; the loops outside the run multiply its lines."""
    moved = _access_vars(acc)
    for k in range(len(loops) - 1, -1, -1):
        lp = loops[k]
        if lp.var not in moved or lp.extent <= 1:
            continue
        if lp.var in acc.nonlinear:
            # NOTE: unknown step: every iteration is assumed to touch a new line
            return math.prod(x.extent for x in loops[:k + 1]), 0.0
        stride = min((abs(c) / a[1] for a, c in acc.coeffs if a[0] is lp.var), default=0.0)
        if stride * geo.eb >= CACHE_LINE:
            return math.prod(x.extent for x in loops[:k + 1]), stride
        span, n_el, j = stride * (lp.extent - 1) + 1, lp.extent, k
        while j > 0:
            c = _unit_coeff(acc, loops[j - 1].var)
            if c is None or c != span:
                break
            j -= 1
            span += c * (loops[j].extent - 1)
            n_el *= loops[j].extent
        run = max(1.0, min(n_el, span * geo.eb / CACHE_LINE))
        return math.prod(x.extent for x in loops[:j]) * run, stride
    return 1.0, 0.0


# ----------------------------------------------------------------------------- one store
def _ann_group(loops: Sequence[Any], member: list[bool]) -> list[float]:
    idx = [k for k, m in enumerate(member) if m]
    if not idx:
        return [0.0] * len(_ANN_FIELDS)
    n = len(loops)
    return [float(len(idx)), float(math.prod(loops[k].extent for k in idx)),
            float(loops[idx[-1]].extent), float(idx[-1] == n - 1), float(idx[0] == 0),
            float(n - 1 - idx[-1])]


def _auto_unrolled(loops: Sequence[Any]) -> list[bool]:
    """Which loops an ``auto_unroll_max_step`` pragma (at or above them) unrolls."""
    out = [lp.kind == "unrolled" for lp in loops]
    max_step, at = 0, -1
    for k, lp in enumerate(loops):
        if lp.auto_unroll:
            max_step, at = lp.auto_unroll, k
    if max_step <= 0:
        return out
    steps = 1
    for k in range(len(loops) - 1, at - 1, -1):
        lp = loops[k]
        if lp.kind == "vectorized":
            continue
        if lp.kind not in ("serial", "unrolled"):
            break
        steps *= lp.extent
        if steps > max_step:
            break
        out[k] = True
    return out


def _store_row(info: StoreInfo, others: dict[Any, list[tuple[int, tuple]]], sid: int,
               is_gpu: bool, n_bufs: int) -> list[float]:
    loops = info.loops
    n = len(loops)
    prod_all = float(math.prod(lp.extent for lp in loops))
    row = [c * prod_all for c in info.ops]
    kinds = [lp.kind for lp in loops]
    row += _ann_group(loops, [k == "vectorized" for k in kinds])
    row += _ann_group(loops, _auto_unrolled(loops))
    row += _ann_group(loops, [k in _PARALLEL_KINDS for k in kinds])
    row.append(float(is_gpu))
    for tag in _GPU_TAGS:
        row.append(float(max(lp.declared for lp in loops if lp.kind == tag))
                   if tag in kinds else 0.0)

    # buffers: merge the accesses of each buffer (distinct index forms)
    per_buf: dict[Any, list[Access]] = {}
    rw: dict[Any, tuple[bool, bool]] = {}
    for acc in info.accesses:
        lst = per_buf.setdefault(acc.buffer, [])
        r, w = rw.get(acc.buffer, (False, False))
        rw[acc.buffer] = (r or not acc.is_write, w or acc.is_write)
        key = (acc.coeffs, acc.nonlinear)
        if all((a.coeffs, a.nonlinear) != key for a in lst):
            lst.append(acc)
    geos = {b: _Geom(b) for b in per_buf}
    # footprints at each level: fp[b][l] over loops[l:] (l = n: nothing varies)
    fp: dict[Any, list[tuple[float, float]]] = {}
    for b, accs in per_buf.items():
        per_acc = [_footprints(a, geos[b], loops) for a in accs]
        # NOTE: several index forms of one buffer (stencils) mostly overlap: take the largest
        fp[b] = per_acc[0] if len(per_acc) == 1 else [
            (max(x[lv][0] for x in per_acc), max(x[lv][1] for x in per_acc))
            for lv in range(n + 1)]

    def bytes_at(level: int) -> float:
        return sum(fp[b][level][0] * geos[b].eb for b in per_buf)

    bufs = []
    for b, accs in per_buf.items():
        geo = geos[b]
        reads, writes = rw[b]
        n_acc = len(accs)
        bytes_ = prod_all * geo.eb * n_acc
        uniq_b = fp[b][0][0] * geo.eb
        lines = stride = 0.0
        for a in accs:
            li, st = _lines_and_stride(a, geo, loops)
            lines += li
            stride = st if stride == 0.0 else min(stride, st or stride)
        uniq_l = fp[b][0][1]
        moved = set().union(*(_access_vars(a) for a in accs))
        reuse = [0.0, 0.0, 1.0]
        dis_iter = dis_bytes = reuse_ct = 0.0
        r_at = next((k for k in range(n - 1, -1, -1)
                     if loops[k].extent > 1 and loops[k].var not in moved), None)
        if r_at is not None:
            reuse = [1.0, 0.0, 0.0]
            dis_iter = float(math.prod(lp.extent for lp in loops[r_at + 1:]))
            dis_bytes = bytes_at(r_at + 1)
            reuse_ct = float(loops[r_at].extent)
        else:
            peers = [(j, vs) for j, vs in others.get(b, ()) if j != sid]
            if peers:
                reuse = [0.0, 1.0, 0.0]
                reuse_ct = float(len(peers))
                mine = tuple(lp.var for lp in loops)
                common = max(_common(mine, vs) for _, vs in peers)
                dis_iter = float(math.prod(lp.extent for lp in loops[common:]))
                dis_bytes = fp[b][common][0] * geo.eb
        div = reuse_ct if reuse_ct >= 1.0 else 1.0
        acc_type = [float(reads and not writes), float(writes and not reads),
                    float(reads and writes)]
        vals = acc_type + [bytes_, uniq_b, lines, uniq_l] + reuse + [
            dis_iter, dis_bytes, reuse_ct, bytes_ / div, uniq_b / div, lines / div,
            uniq_l / div, stride]
        bufs.append(((lines, bytes_), vals))
    bufs.sort(key=lambda x: x[0], reverse=True)
    for k in range(n_bufs):
        row += bufs[k][1] if k < len(bufs) else [0.0] * len(_BUF_FIELDS)

    row += _ai_curve(info, loops, bytes_at)
    if info.alloc_depth >= 0:
        geo = _Geom(info.buffer)
        outer = float(math.prod(lp.extent for lp in loops[:info.alloc_depth]))
        row += [geo.total * geo.eb, geo.total * outer, outer,
                float(math.prod(lp.extent for lp in loops[info.alloc_depth:]))]
    else:
        row += [0.0] * 4
    unroll_step = next((lp.auto_unroll for lp in reversed(loops) if lp.auto_unroll), 0)
    row += [prod_all, float(n), float(unroll_step)]
    return row


def _common(a: tuple, b: tuple) -> int:
    k = 0
    while k < len(a) and k < len(b) and a[k] is b[k]:
        k += 1
    return k


def _ai_curve(info: StoreInfo, loops: Sequence[Any], bytes_at: Any) -> list[float]:
    fops = sum(info.ops[k] for k, name in enumerate(OP_NAMES) if name.startswith("float"))
    if fops == 0:
        return [0.0] * _N_AI
    xs: list[float] = []
    ys: list[float] = []
    inner = 1.0
    for level in range(len(loops), -1, -1):
        if level < len(loops):
            inner *= loops[level].extent
        comp = fops * inner
        x = math.log2(comp + 1.0)
        y = comp / max(bytes_at(level), 1.0)
        if xs and x <= xs[-1]:
            ys[-1] = y
            continue
        xs.append(x)
        ys.append(y)
    pts = [(k + 1) / _N_AI * xs[-1] for k in range(_N_AI)]
    return [float(v) for v in np.interp(pts, xs, ys)]


def features_of_body(body: Any, is_gpu: bool = False,
                     max_n_bufs: int | None = None) -> np.ndarray:
    """The ``(n_stores, F)`` per-store features of a lowered loop nest (log-scaled)."""
    n_bufs = DEFAULT_MAX_N_BUFS if max_n_bufs is None else int(max_n_bufs)
    stores = walk(body)
    users: dict[Any, list[tuple[int, tuple]]] = {}
    for j, st in enumerate(stores):
        vs = tuple(lp.var for lp in st.loops)
        for b in {a.buffer for a in st.accesses}:
            users.setdefault(b, []).append((j, vs))
    rows = [_store_row(st, users, j, is_gpu, n_bufs) for j, st in enumerate(stores)]
    width = len(get_per_store_feature_names(n_bufs))
    x = np.asarray(rows, dtype=np.float64).reshape(len(rows), width)
    m = _mask(n_bufs)
    x[:, m] = np.sign(x[:, m]) * np.log2(np.abs(x[:, m]) + 1.0)
    return x.astype(np.float32)
