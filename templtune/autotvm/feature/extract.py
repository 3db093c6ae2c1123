"""Config-level features and a cached, process-parallel extractor.

``config_feature(task, config, feature_type)`` instantiates the template for one config, lowers it
(lowering only, no code generation) and returns its feature vector:

* ``"knob"``: ``config.get_flatten_feature()``;
* ``"itervar"``: :func:`.itervar.itervar_feature` of the lowered function followed by the knob
  features;
* ``"curve"``: :func:`.curve.curve_feature` with ``curve_sample_n`` samples (20 in the tuner).

:class:`FeatureExtractor` caches vectors per config index and computes missing ones in a process
pool (fork start method; the task travels in the pool initializer's arguments, not through
module globals of the parent).

Column alignment (templtune improvement): lowering drops unit loops, so configs of one template
can have different loop nests and a positional itervar vector would put different loops in the
same column. The extractor therefore places every itervar value in a column keyed by its *name*
(loop variable name + field, e.g. ``"i.inner.A_0.count"``): the same loop lands in the same
column in every config, absent loops leave zeros, and columns for names first seen later are
appended at the end (a model trained on fewer columns simply ignores them).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from templtune.autotvm.feature.curve import curve_feature
from templtune.autotvm.feature.itervar import itervar_feature, itervar_feature_names
from templtune.autotvm.feature.loops import summarize

logger = logging.getLogger("autotvm.feature")

FEATURE_TYPES = ("itervar", "knob", "curve")
CACHE_LIMIT = 100_000
TUNER_CURVE_SAMPLE_N = 20


def check_feature_type(feature_type: str) -> str:
    if feature_type not in FEATURE_TYPES:
        raise ValueError(f"feature_type must be one of {FEATURE_TYPES}, got {feature_type!r}")
    return feature_type


def knob_feature(config: Any) -> np.ndarray:
    return np.asarray(config.get_flatten_feature(), dtype=np.float32).reshape(-1)


def lower_for_features(s: Any, args: Sequence[Any]) -> Any:
    """Lower a schedule up to the loop nest: bound inference and nest building, *without* the
    vectorize/unroll passes, so vectorized and unrolled loops stay loops with their annotation
    (as AutoTVM's feature lowering). Falls back to the full ``lower`` if the lowering internals
    are unavailable."""
    try:
        from templtune.lower.ir import PrimFunc
        from templtune.lower.nest import build_nest
        from templtune.schedule.bound import infer_bound
    except ImportError:  # pragma: no cover - depends on the lowering package layout
        from templtune.lower.lower_api import lower

        return lower(s, args, simple_mode=True)
    tensors = [s.resolve(a) for a in args]
    params, body = build_nest(s, tensors, infer_bound(s))
    return PrimFunc("main", tuple(params), body)


def lower_config(task: Any, config: Any) -> Any:
    """Instantiate ``task`` with ``config`` under its target and lower it for features."""
    target = getattr(task, "target", None)
    ctx: Any = target if hasattr(target, "__enter__") else contextlib.nullcontext()
    with ctx:
        s, args = task.instantiate(config)
        return lower_for_features(s, args)


LowerFn = Callable[[Any, Any], Any]


def config_feature(task: Any, config: Any, feature_type: str,
                   curve_sample_n: int = TUNER_CURVE_SAMPLE_N,
                   lower_fn: LowerFn | None = None) -> np.ndarray:
    """The feature vector of one config (see the module docstring). ``lower_fn(task, config)``
    replaces :func:`lower_config` (tests, or tasks lowered another way)."""
    check_feature_type(feature_type)
    if feature_type == "knob":
        return knob_feature(config)
    summary = summarize((lower_fn or lower_config)(task, config))
    if feature_type == "itervar":
        return np.concatenate([itervar_feature(summary), knob_feature(config)])
    return curve_feature(summary, curve_sample_n)


Named = tuple[tuple[str, ...] | None, np.ndarray]


def config_feature_named(task: Any, config: Any, feature_type: str,
                         curve_sample_n: int = TUNER_CURVE_SAMPLE_N,
                         lower_fn: LowerFn | None = None) -> Named:
    """``(names, values)``: itervar values with a name per value (loop name + field, then
    ``knob.<k>``); ``names`` is None for the positional knob and curve features."""
    if feature_type != "itervar":
        return None, config_feature(task, config, feature_type, curve_sample_n, lower_fn)
    summary = summarize((lower_fn or lower_config)(task, config))
    knobs = knob_feature(config)
    names = tuple(itervar_feature_names(summary)) + tuple(f"knob.{k}" for k in range(len(knobs)))
    return names, np.concatenate([itervar_feature(summary), knobs])


def _safe_feature(task: Any, config: Any, feature_type: str, sample_n: int,
                  lower_fn: LowerFn | None = None) -> Named | None:
    try:
        return config_feature_named(task, config, feature_type, sample_n, lower_fn)
    except Exception as err:  # noqa: BLE001 - a failed config is a zero row, not a crash
        logger.debug("feature extraction failed for %s: %s", config, err)
        return None


# ----------------------------------------------------------------------------- worker side
# NOTE: these globals live only in pool worker processes; they are set from the initializer's
# arguments, never inherited from the parent's state.
_W: dict[str, Any] = {}


def _worker_init(task: Any, feature_type: str, sample_n: int, lower_fn: LowerFn | None) -> None:
    _W.update(task=task, feature_type=feature_type, sample_n=sample_n, lower_fn=lower_fn)


def _worker_index(index: int) -> Named | None:
    task = _W["task"]
    try:
        config = task.config_space.get(int(index))
    except Exception:  # noqa: BLE001
        return None
    return _safe_feature(task, config, _W["feature_type"], _W["sample_n"], _W["lower_fn"])


def _worker_pair(arg: tuple[Any, Any, str, int, LowerFn | None]) -> Named | None:
    return _safe_feature(*arg)


def pad_rows(rows: Sequence[np.ndarray | None], width: int | None = None) -> np.ndarray:
    """Stack rows, right-padding with zeros (``None`` → zeros) to ``width`` (default: the
    longest row); longer rows are truncated."""
    if width is None:
        width = max((len(r) for r in rows if r is not None), default=0)
    out = np.zeros((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        if r is not None:
            n = min(width, len(r))
            out[i, :n] = r[:n]
    return out


_Row = tuple[np.ndarray | None, np.ndarray]  # (column ids or None = positional, values)


class FeatureExtractor:
    """Cached feature extraction for the configs of one task.

    Parameters
    ----------
    task : Task
        The tuning task (``config_space``, ``instantiate``, ``target``).
    feature_type : str
        ``"itervar"``, ``"knob"`` or ``"curve"``.
    n_workers : int, optional
        Processes used for extraction; default ``os.cpu_count()``. ``0`` or ``1`` extracts in
        this process (knob features are always extracted in-process: they need no lowering).
    curve_sample_n : int
        Samples per curve for ``"curve"``.
    min_parallel : int
        Batches with fewer missing configs than this are extracted in-process.
    lower_fn : callable(task, config) -> PrimFunc, optional
        Replaces :func:`lower_config` (default: instantiate the template and lower it).
    """

    def __init__(self, task: Any, feature_type: str = "itervar", n_workers: int | None = None,
                 curve_sample_n: int = TUNER_CURVE_SAMPLE_N, min_parallel: int = 16,
                 lower_fn: LowerFn | None = None) -> None:
        self.lower_fn = lower_fn
        self.task = task
        self.feature_type = check_feature_type(feature_type)
        self.n_workers = (os.cpu_count() or 1) if n_workers is None else n_workers
        self.curve_sample_n = curve_sample_n
        self.min_parallel = min_parallel
        self.cache: dict[int, _Row | None] = {}
        #: itervar column layout: value name -> column (grows at the end as names appear)
        self.columns: dict[str, int] = {}
        self.n_columns = 0
        self._pool: ProcessPoolExecutor | None = None
        #: wall seconds spent computing (not serving cached) features, and configs computed
        self.seconds = 0.0
        self.n_computed = 0
        self._knob_table: Any = None

    # ------------------------------------------------------------------ pool
    def _get_pool(self) -> ProcessPoolExecutor | None:
        if self._pool is None and self.n_workers > 1 and self.feature_type != "knob":
            try:
                ctx = mp.get_context("fork")
                self._pool = ProcessPoolExecutor(
                    self.n_workers, mp_context=ctx, initializer=_worker_init,
                    initargs=(self.task, self.feature_type, self.curve_sample_n, self.lower_fn))
            except (ValueError, OSError) as err:
                logger.warning("feature pool unavailable (%s); extracting in-process", err)
                self.n_workers = 1
        return self._pool

    def close(self) -> None:
        """Shut the worker pool down (it is re-created on demand)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = None
        return state

    # ------------------------------------------------------------------ extraction
    def _encode(self, feat: Named | None) -> _Row | None:
        """Map named values to column ids (allocating new columns at the end)."""
        if feat is None:
            return None
        names, vals = feat
        if names is None:
            self.n_columns = max(self.n_columns, len(vals))
            return None, vals
        cols = self.columns
        ids = np.fromiter((cols.setdefault(n, len(cols)) for n in names), dtype=np.int64,
                          count=len(names))
        self.n_columns = len(cols)
        return ids, vals

    def _matrix(self, rows: Sequence[_Row | None], width: int | None) -> np.ndarray:
        width = self.n_columns if width is None else width
        out = np.zeros((len(rows), width), dtype=np.float32)
        for r, row in enumerate(rows):
            if row is None:
                continue
            ids, vals = row
            if ids is None:
                n = min(width, len(vals))
                out[r, :n] = vals[:n]
            else:
                keep = ids < width
                out[r, ids[keep]] = vals[keep]
        return out

    def _compute(self, indices: list[int]) -> list[Named | None]:
        pool = self._get_pool() if len(indices) >= self.min_parallel else None
        if pool is not None:
            chunk = max(1, len(indices) // (4 * self.n_workers))
            try:
                return list(pool.map(_worker_index, indices, chunksize=chunk))
            except Exception as err:  # noqa: BLE001 - a broken pool falls back to serial
                logger.warning("feature pool failed (%s); extracting in-process", err)
                self.close()
                self.n_workers = 1
        space = self.task.config_space
        return [_safe_feature(self.task, space.get(int(i)), self.feature_type,
                              self.curve_sample_n, self.lower_fn) for i in indices]

    def _knob_fast(self, idx: list[int], width: int | None) -> np.ndarray | None:
        """Knob features without building configs: ``base + sum_j delta_j[digit_j]``.

        NOTE: a config's flattened knob vector is the concatenation of one fixed-width segment
        per knob, so it is additive over knobs; the per-knob deltas are computed once from
        ``sum(dims)`` configs. Returns None (slow path) when that does not hold."""
        if self._knob_table is None:
            self._knob_table = False
            try:
                space = self.task.config_space
                dims = [int(d) for d in space.dims]
                strides = np.concatenate([[1], np.cumprod(dims)[:-1]]).astype(np.int64)
                base = knob_feature(space.get(0))
                deltas = []
                for j, d in enumerate(dims):
                    rows = [knob_feature(space.get(int(e * strides[j]))) for e in range(d)]
                    if any(len(r) != len(base) for r in rows):
                        return None
                    deltas.append(np.stack(rows) - base)
                self._knob_table = (np.asarray(dims, np.int64), strides, base, deltas)
            except Exception:  # noqa: BLE001 - e.g. filtered indices, odd knob encodings
                return None
        if self._knob_table is False:
            return None
        dims, strides, base, deltas = self._knob_table
        pts = np.asarray(idx, dtype=np.int64)
        out = np.broadcast_to(base, (len(pts), len(base))).copy()
        for j, delta in enumerate(deltas):
            out += delta[(pts // strides[j]) % dims[j]]
        return out if width is None else pad_rows(list(out), width)

    def get(self, indices: Iterable[int], width: int | None = None) -> np.ndarray:
        """Feature matrix of the configs ``indices`` (one row each, zero rows for configs whose
        extraction failed), padded/truncated to ``width`` columns when given."""
        idx = [int(i) for i in indices]
        if self.feature_type == "knob":
            fast = self._knob_fast(idx, width)
            if fast is not None:
                return fast
        if len(self.cache) >= CACHE_LIMIT:
            self.cache.clear()
        missing = list(dict.fromkeys(i for i in idx if i not in self.cache))
        if missing:
            tic = time.perf_counter()
            for i, f in zip(missing, self._compute(missing)):
                self.cache[i] = self._encode(f)
            self.seconds += time.perf_counter() - tic
            self.n_computed += len(missing)
        return self._matrix([self.cache[i] for i in idx], width)

    def get_pairs(self, pairs: Sequence[tuple[Any, Any]], width: int | None = None) -> np.ndarray:
        """Features of (task, config) pairs of possibly other tasks (for logs); not cached."""
        if self.feature_type == "knob":
            return pad_rows([knob_feature(c) for _, c in pairs], width)
        args = [(t, c, self.feature_type, self.curve_sample_n, self.lower_fn) for t, c in pairs]
        rows: list[Named | None] | None = None
        pool = self._get_pool() if len(args) >= self.min_parallel else None
        if pool is not None:
            try:
                rows = list(pool.map(_worker_pair, args,
                                     chunksize=max(1, len(args) // (4 * self.n_workers))))
            except Exception as err:  # noqa: BLE001 - e.g. a task that does not pickle
                logger.info("parallel log feature extraction failed (%s); serial", err)
        if rows is None:
            rows = [_worker_pair(a) for a in args]
        return self._matrix([self._encode(r) for r in rows], width)
