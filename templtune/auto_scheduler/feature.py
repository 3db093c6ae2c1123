"""Per-store features of auto-scheduler states (TVM's ``auto_scheduler.feature`` API).

A state is replayed onto its DAG's te schedule and lowered to the loop nest by bound inference
and nest building only (no vectorize/unroll passes, no verification: a few milliseconds), then
every store statement gives one row (:mod:`.feature_row` documents the layout). A state that
fails to replay or lower gives an empty ``(0, F)`` array, never an exception.

Features are cached per DAG and state (the encoded transform steps): the evolutionary search
scores the same parents again and again, and the cost model's update reuses the rows computed
while the measured states were being predicted.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .feature_row import DEFAULT_MAX_N_BUFS, features_of_body, get_per_store_feature_names

logger = logging.getLogger("auto_scheduler.feature")

#: Cached feature arrays over all DAGs (the oldest of the largest cache dropped beyond this).
CACHE_LIMIT = 50_000
_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_DAGS_BY_KEY: dict[str, Any] = {}


def state_key(state: Any) -> str:
    """The encoded transform steps of a state (its identity for caching)."""
    return json.dumps([s.encode() for s in state.transform_steps])


def _is_gpu(task: Any) -> bool:
    from .search_task import is_gpu_target

    return is_gpu_target(getattr(task, "target", "llvm"))


def _dag_of(task: Any) -> Any:
    dag = getattr(task, "compute_dag", None)
    if dag is not None:
        return dag
    key = task.workload_key
    if key not in _DAGS_BY_KEY:
        from .compute_dag import ComputeDAG

        try:
            _DAGS_BY_KEY[key] = ComputeDAG(key)
        except Exception as exc:  # noqa: BLE001 - an unregistered workload has no features
            logger.warning("per-store features: cannot build the DAG of %s (%s)", key, exc)
            _DAGS_BY_KEY[key] = None
    return _DAGS_BY_KEY[key]


def _layout_rewrite(task: Any) -> int:
    return int(getattr(task, "layout_rewrite_option", 0) or 0)


def lower_state(dag: Any, state: Any, is_gpu: bool = False, layout_rewrite: int = 0) -> Any:
    """The loop nest (statement) of ``state`` replayed on ``dag`` as it is measured (with the
    task's layout rewrite): bound inference and nest building, vectorized/unrolled loops kept
    as loops."""
    from templtune.lower.nest import build_nest
    from templtune.schedule.bound import infer_bound

    if not hasattr(state, "stages"):
        state = dag.replay(state.transform_steps)
    sch, args = dag.apply_steps_from_state(state, layout_rewrite=layout_rewrite,
                                           is_gpu=is_gpu)
    tensors = [sch.resolve(a) for a in args]
    _, body = build_nest(sch, tensors, infer_bound(sch))
    return body


def _width(max_n_bufs: int | None) -> int:
    return len(get_per_store_feature_names(max_n_bufs))


def features_of_state(dag: Any, state: Any, is_gpu: bool = False,
                      max_n_bufs: int | None = None, layout_rewrite: int = 0) -> np.ndarray:
    """Uncached ``(n_stores, F)`` features of one state; ``(0, F)`` if it does not lower."""
    try:
        return features_of_body(lower_state(dag, state, is_gpu, layout_rewrite), is_gpu,
                                max_n_bufs)
    except Exception as exc:  # noqa: BLE001 - a state that does not lower has no stores
        logger.debug("per-store features: state does not lower (%s: %s)",
                     type(exc).__name__, exc)
        return np.zeros((0, _width(max_n_bufs)), dtype=np.float32)


def _cache(dag: Any) -> dict:
    c = _CACHES.get(dag)
    if c is None:
        c = _CACHES[dag] = {}
    return c


def get_per_store_features_from_states(states: Sequence[Any], task: Any,
                                       max_n_bufs: int | None = None) -> list[np.ndarray]:
    """Per-store features of states of one task.

    Parameters
    ----------
    states : list of State
        States (or record states: anything with ``transform_steps``) of ``task``.
    task : SearchTask
        Their task (its DAG and target).
    max_n_bufs : int, optional
        Buffers described per store (5 by default).

    Returns
    -------
    list of numpy.ndarray
        One ``(n_stores, F)`` float32 array per state, ``F = len(get_per_store_feature_names(
        max_n_bufs))``; ``(0, F)`` for a state that fails to replay or lower.
    """
    n_bufs = DEFAULT_MAX_N_BUFS if max_n_bufs is None else int(max_n_bufs)
    dag = _dag_of(task)
    if dag is None:
        return [np.zeros((0, _width(n_bufs)), dtype=np.float32) for _ in states]
    gpu, lr = _is_gpu(task), _layout_rewrite(task)
    cache = _cache(dag)
    out = []
    for s in states:
        key = (gpu, lr, n_bufs, state_key(s))
        x = cache.get(key)
        if x is None:
            # NOTE: a fork pool measured slower here (the lowering is pure Python and the
            # cores are busy measuring); states are extracted in-process.
            x = cache[key] = features_of_state(dag, s, gpu, n_bufs, lr)
        out.append(x)
    total = sum(len(c) for c in _CACHES.values())
    if total > CACHE_LIMIT:
        # NOTE: one limit over all DAGs (a task scheduler holds many); the oldest entries of
        # the largest cache go first
        big = max(_CACHES.values(), key=len)
        for k in list(big)[:total - CACHE_LIMIT + CACHE_LIMIT // 10]:
            del big[k]
    return out


def normalized_throughputs(inputs: Sequence[Any], results: Sequence[Any]) -> tuple[
        np.ndarray, np.ndarray]:
    """``(min cost of the task / cost, task ids)`` per pair; a failed run has cost 1e10."""
    from .measure import MAX_FLOAT
    from .measure_record import usable_cost

    ids: dict[tuple[str, str], int] = {}
    task_ids, costs = [], []
    for inp, res in zip(inputs, results):
        k = (inp.task.workload_key, str(getattr(inp.task, "target", "")))
        task_ids.append(ids.setdefault(k, len(ids)))
        cost = usable_cost(res)  # a logged NaN/zero/negative cost counts as a failure
        costs.append(MAX_FLOAT if cost is None else cost)
    tid = np.asarray(task_ids, dtype=np.int64)
    c = np.asarray(costs, dtype=np.float64)
    best = np.full(len(ids), np.inf)
    np.minimum.at(best, tid, c)
    return (best[tid] / c if len(c) else c), tid


def get_per_store_features_from_measure_pairs(
        inputs: Sequence[Any], results: Sequence[Any], skip_first_n_feature_extraction: int = 0,
        max_n_bufs: int | None = None) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Features, normalized throughputs and task ids of measured pairs.

    Parameters
    ----------
    inputs, results : list of MeasureInput, list of MeasureResult
        Measured states (their task may be a record task: the DAG comes from the workload key).
    skip_first_n_feature_extraction : int
        The first pairs get empty feature arrays (they still count for the throughputs).
    max_n_bufs : int, optional
        Buffers described per store.

    Returns
    -------
    features : list of numpy.ndarray
        One ``(n_stores, F)`` array per pair (see :func:`get_per_store_features_from_states`).
    normalized_throughputs : numpy.ndarray
        ``min cost of the pair's task / cost`` in (0, 1]; ~0 for failed measurements.
    task_ids : numpy.ndarray
        Index of each pair's (workload key, target) in order of first appearance.
    """
    width = _width(max_n_bufs)
    feats: list[np.ndarray] = []
    groups: dict[tuple[str, str], list[int]] = {}
    for k, inp in enumerate(inputs):
        groups.setdefault((inp.task.workload_key, str(getattr(inp.task, "target", ""))),
                          []).append(k)
    feats = [np.zeros((0, width), dtype=np.float32)] * len(inputs)
    for idx in groups.values():
        todo = [k for k in idx if k >= skip_first_n_feature_extraction]
        if not todo:
            continue
        task = inputs[todo[0]].task
        xs = get_per_store_features_from_states([inputs[k].state for k in todo], task,
                                                max_n_bufs)
        for k, x in zip(todo, xs):
            feats[k] = x
    y, tid = normalized_throughputs(inputs, results)
    return feats, y, tid


def get_per_store_features_from_file(filename: str, max_lines: int | None = None,
                                     max_n_bufs: int | None = None) -> tuple[
        list[np.ndarray], np.ndarray, np.ndarray]:
    """:func:`get_per_store_features_from_measure_pairs` of the records in a log file
    (workloads must be registered)."""
    from .measure_record import RecordReader

    inputs, results = RecordReader(filename).read_lines(max_lines)
    return get_per_store_features_from_measure_pairs(inputs, results, max_n_bufs=max_n_bufs)


__all__ = [
    "get_per_store_feature_names", "get_per_store_features_from_file",
    "get_per_store_features_from_measure_pairs", "get_per_store_features_from_states",
    "lower_state", "normalized_throughputs", "state_key",
]
