"""Runner side of a measurement worker, per candidate: load, check and time a built module.

Runs on the argument states installed by :mod:`.worker_setup`. Part of :mod:`.worker`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.runtime.aligned import aligned_copy

from .measure import MeasureErrorNo
from .worker_build import load_artifact
from .worker_setup import _RUN


@dataclass(frozen=True, slots=True)
class TimingOptions:
    """How the runner checks and times a candidate (shared by every runner).

    ``repeat`` rounds of ``number`` calls, each round at least ``min_repeat_ms`` long; ``flush``
    flushes the CPU cache before each round; outputs pass when ``|got - ref| <= atol +
    rtol * |ref|`` element-wise; ``timeout`` bounds one candidate's load, check and timing.
    """

    number: int
    repeat: int
    min_repeat_ms: float
    flush: bool
    rtol: float
    atol: float
    timeout: float | None


@dataclass(frozen=True, slots=True)
class RunRequest:
    """Check (when ``check``) and time the module ``artifact`` on the buffers of ``token``."""

    token: str
    artifact: bytes
    check: bool
    timing: TimingOptions


@dataclass(frozen=True, slots=True)
class RunReply:
    """A runner worker's answer: seconds per round on success, else an error and its detail."""

    error_no: MeasureErrorNo
    costs: tuple[float, ...] = ()
    detail: str = ""
    #: the CUDA runtime that timed the candidate (empty on the CPU)
    device: str = ""
    #: the threads a CPU kernel ran with (0 on a GPU)
    threads: int = 0


_ALLOCATOR_PINNED: list[bool] = []


def _pin_scratch_allocator() -> bool:
    """Keep glibc from handing freed scratch buffers back to the OS in this runner process.

    A built x86 kernel allocates its intermediate buffers (packed data and weights, Winograd
    tiles) on every call. Whether glibc then keeps that memory depends on the allocation
    pattern: its dynamic mmap threshold usually settles after a few calls, but when the
    buffers freed together leave more than the trim threshold at the top of the heap, glibc
    trims it and the next call faults every page in again (tests/test_measure_allocator.py
    shows such a pattern), so a config's time would depend on its scratch sizes rather than
    its loops. Pinning the thresholds (``mallopt``; 32 MiB is glibc's largest mmap threshold
    on 64-bit hosts) times the steady state that ``benchmarks/ops.py`` (which pins them too)
    and a workspace-pooling runtime (TVM's) see. ``TEMPLTUNE_RUNNER_PIN_MALLOC=0`` turns it
    off; returns whether the allocator is pinned.
    """
    if _ALLOCATOR_PINNED:
        return _ALLOCATOR_PINNED[0]
    from templtune import config
    from templtune.runtime.allocator import raise_malloc_thresholds

    ok = bool(config.get("TEMPLTUNE_RUNNER_PIN_MALLOC")) and raise_malloc_thresholds()
    _ALLOCATOR_PINNED.append(ok)
    return ok


def _unwritten(ref: np.ndarray) -> np.ndarray:
    """A fill for an output buffer that differs from ``ref`` in every element, so that a kernel
    leaving (part of) its output unwritten fails the check: NaN for floats, ``ref + 1``
    (wrapping) for integers, ``~ref`` for booleans."""
    if ref.dtype.kind in "fc":
        return np.full(ref.shape, np.nan, dtype=ref.dtype)
    if ref.dtype.kind == "b":
        return ~ref
    return ref + np.ones((), dtype=ref.dtype)


def run_candidate(req: RunRequest) -> RunReply:
    """Load, check and time one built candidate.

    The first call checks the outputs (when ``req.check``; output buffers are filled with
    values that differ from the reference first) and serves as a probe: if it shows that the
    timing rounds cannot finish within the timeout, the candidate is reported as ``RUN_TIMEOUT``
    at once instead of after waiting for the timeout (templtune shortcut).
    """
    import templtune

    t_start = time.perf_counter()
    _pin_scratch_allocator()
    st = _RUN[req.token]
    opt = req.timing
    check = req.check and st.reference is not None
    module = load_artifact(req.artifact)
    dev = templtune.cuda() if st.device == "cuda" else templtune.cpu()
    # NOTE: 64-byte aligned as the network runtime's buffers (and TVM's NDArrays): a kernel is
    # timed on memory laid out as inside a network
    arrays = [aligned_copy(a) for a in st.inputs]
    if check:
        assert st.reference is not None
        with np.errstate(over="ignore"):
            for pos, ref in zip(st.outputs, st.reference):
                arrays[pos] = aligned_copy(_unwritten(ref))
    t0 = time.perf_counter()
    module(*arrays)
    first = time.perf_counter() - t0
    if check:
        assert st.reference is not None
        for pos, original in enumerate(st.inputs):
            if pos not in st.outputs and not np.array_equal(arrays[pos], original,
                                                            equal_nan=original.dtype.kind == "f"):
                return RunReply(MeasureErrorNo.WRONG_ANSWER,
                                detail=f"the candidate overwrote input buffer {pos}")
        for pos, ref in zip(st.outputs, st.reference):
            problem = compare(np.asarray(arrays[pos]), ref, opt.rtol, opt.atol)
            if problem:
                return RunReply(MeasureErrorNo.WRONG_ANSWER, detail=f"output {pos} {problem}")
    if opt.timeout is not None:
        predicted = first * (1 + opt.number * opt.repeat) + opt.repeat * opt.min_repeat_ms / 1e3
        if time.perf_counter() - t_start + predicted > opt.timeout:
            return RunReply(MeasureErrorNo.RUN_TIMEOUT, detail=(
                f"one call takes {first:.3g} s: {opt.number}x{opt.repeat} timed calls cannot "
                f"finish within the {opt.timeout} s timeout"))
    kwargs: dict[str, Any] = {"number": opt.number, "repeat": opt.repeat,
                              "min_repeat_ms": opt.min_repeat_ms}
    # NOTE: the checking/probing call above already ran the kernel on these very arrays (caches,
    # page faults, thread pool warm), so the evaluator's own warm-up call would only repeat it.
    extras: dict[str, Any] = {"warmup": 0}
    if opt.flush:
        extras["enable_cpu_cache_flush"] = True
    entry = getattr(module, "entry_name", None) or "default_function"
    try:
        timer = module.time_evaluator(entry, dev, **kwargs, **extras)
    except TypeError:
        # a module type without these options (e.g. CUDA): its own defaults
        timer = module.time_evaluator(entry, dev, **kwargs)
    res = timer(*arrays)
    return RunReply(MeasureErrorNo.NO_ERROR, tuple(float(c) for c in getattr(res, "results", res)),
                    device=_runtime_name(st.device),
                    threads=int(getattr(module, "num_threads", 0) or 0))


def _runtime_name(device: str) -> str:
    """The CUDA runtime this process runs kernels on (``emulator`` without a GPU), else ""."""
    if device != "cuda":
        return ""
    from templtune.runtime.cuda.backend import get_backend

    return str(get_backend().name)


def compare(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> str:
    """Why ``got`` is not ``ref`` (empty when it is): floats pass element-wise when
    ``|got - ref| <= atol + rtol * |ref|`` (numpy's rule; NaN only where ``ref`` is NaN), other
    dtypes must be equal."""
    if got.shape != ref.shape:
        return f"has shape {got.shape}, the reference {ref.shape}"
    if ref.dtype.kind in "fc":
        ok = np.isclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = got == ref
    bad = int(ok.size - np.count_nonzero(ok))
    if not bad:
        return ""
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.where(ok, 0.0, np.abs(g - r))
    worst = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), ok.shape)
    return (f"differs from the reference in {bad} of {ok.size} elements (e.g. at {worst}: "
            f"{got[worst]!r} vs {ref[worst]!r}; tolerance {atol} + {rtol} * |ref|)")
