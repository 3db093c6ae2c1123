"""Functions that run *inside* measurement worker processes (builders and the runner).

Everything crossing the process boundary is a small frozen dataclass: a request naming a
:class:`~.candidate.Candidate` (how to rebuild the schedule), exported module bytes, numpy arrays
once per argument signature, and a typed reply back. Per-process caches live here; they are
filled inside the worker, never inherited.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.errors import CodegenError, InstantiationError
from templtune.runtime.aligned import aligned_copy

from .candidate import ArgInfo, Candidate, arg_info, is_device_target
from .measure import MeasureErrorNo

# NOTE: modules a worker imports while it starts (launched early, alongside the other workers), so
# that the first candidate does not pay for importing the compiler and the runtime.
BUILD_PRELOAD = ("templtune", "templtune.measure.worker", "templtune.build_module",
                 "templtune.lower.lower_api", "templtune.codegen.llvm", "templtune.runtime.module")
RUN_PRELOAD = BUILD_PRELOAD  # the runner builds the naive-schedule reference too


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """Build ``candidate`` with ``templtune.build(..., **build_kwargs)``."""

    candidate: Candidate
    build_kwargs: dict


@dataclass(frozen=True, slots=True)
class BuildReply:
    """A build worker's answer: the exported module and argument info, or an error."""

    error_no: MeasureErrorNo
    artifact: bytes | None
    detail: str
    seconds: float
    arg_info: tuple[ArgInfo, ...] = ()


def _detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-4000:]}"


def build_candidate(req: BuildRequest) -> BuildReply:
    """Rebuild the candidate's schedule and build it; never raises for a bad candidate.

    Error codes are chosen by exception type: ``InstantiationError`` is
    ``INSTANTIATION_ERROR``, a ``CodegenError`` is ``COMPILE_DEVICE`` on GPU targets and
    ``COMPILE_HOST`` otherwise, anything else is ``COMPILE_HOST``.
    """
    t0 = time.perf_counter()
    target: Any = req.candidate.target
    try:
        import templtune

        inst = req.candidate.instantiate()
        target = inst.target
        with _target_scope(target):
            module = templtune.build(inst.schedule, inst.args, target=target, **req.build_kwargs)
        return BuildReply(MeasureErrorNo.NO_ERROR, export_module(module), "",
                          time.perf_counter() - t0, arg_info(inst.args))
    except InstantiationError as exc:
        code = MeasureErrorNo.INSTANTIATION_ERROR
        detail = _detail(exc)
    except CodegenError as exc:
        code = (MeasureErrorNo.COMPILE_DEVICE if is_device_target(target)
                else MeasureErrorNo.COMPILE_HOST)
        detail = _detail(exc)
    except Exception as exc:  # noqa: BLE001 - any other failure is a host compile error
        code = MeasureErrorNo.COMPILE_HOST
        detail = _detail(exc)
    return BuildReply(code, None, detail, time.perf_counter() - t0)


_PICKLED = b"TEMPLTUNE-PICKLED-MODULE\n"


def export_module(module: Any) -> bytes:
    """Bytes that :func:`load_artifact` turns back into a callable module in another process:
    ``module.export()`` when the module type has it, else the pickled module (e.g. a CUDA
    module, which carries its compiled binary)."""
    export = getattr(module, "export", None)
    if export is not None:
        return bytes(export())
    import pickle

    # NOTE: a CUDA module keeps its kernel IR in the pickle when the emulator is selected
    # (CudaModule.__getstate__), so nothing here depends on the runtime choice.
    return _PICKLED + pickle.dumps(module)


def load_artifact(artifact: bytes) -> Any:
    """Inverse of :func:`export_module`."""
    if artifact.startswith(_PICKLED):
        import pickle

        return pickle.loads(artifact[len(_PICKLED):])
    from templtune.runtime import load_module

    return load_module(artifact)


class _target_scope:  # noqa: N801 - used like a function
    """``with target:`` when the target is a context manager, else nothing."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.entered = False

    def __enter__(self) -> None:
        enter = getattr(self.target, "__enter__", None)
        if enter is not None:
            enter()
            self.entered = True

    def __exit__(self, *exc: object) -> None:
        if self.entered:
            self.target.__exit__(*exc)


# ---- runner side ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SetupRequest:
    """Prepare inputs (and, with ``check``, reference outputs) for one argument signature."""

    candidate: Candidate
    arg_info: tuple[ArgInfo, ...]
    seed: int
    ref_input: tuple[np.ndarray, ...] | None
    check: bool


@dataclass(frozen=True, slots=True)
class RunSetup:
    """Argument buffers of one signature in the runner process, and their reference outputs.

    ``reference`` is None when it was not computed (checking off, or both the naive build and
    the numpy evaluator failed: ``note`` says why).
    """

    inputs: tuple[np.ndarray, ...]
    outputs: tuple[int, ...]
    reference: tuple[np.ndarray, ...] | None
    note: str
    device: str


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


_RUN: dict[str, RunSetup] = {}
_MAX_STATES = 4  # argument signatures kept in the runner process at once


def _random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, size=shape).astype(np_dtype)
    if np_dtype.kind in "iu":
        return rng.integers(0, 8, size=shape).astype(np_dtype)
    if np_dtype.kind == "b":
        return rng.random(size=shape) < 0.5
    return np.zeros(shape, dtype=np_dtype)


def prepare_run(req: SetupRequest) -> RunSetup:
    """Set up one argument signature in the runner process: inputs and reference outputs.

    The reference is the candidate's outputs built with the naive schedule
    (``create_schedule([out.op ...])``), falling back to the numpy evaluator.
    """
    info = req.arg_info
    outputs = tuple(k for k, a in enumerate(info) if a.is_output)
    if req.ref_input is not None:
        if len(req.ref_input) != len(info) or any(
                tuple(np.shape(x)) != a.shape for x, a in zip(req.ref_input, info)):
            raise ValueError("ref_input does not match the candidate's arguments: "
                             f"{[np.shape(x) for x in req.ref_input]} vs {[a.shape for a in info]}")
        inputs = [np.array(x, dtype=a.dtype, copy=True) for x, a in zip(req.ref_input, info)]
    else:
        rng = np.random.default_rng(req.seed)
        inputs = [np.zeros(a.shape, dtype=np.dtype(a.dtype)) if a.is_output
                  else _random_array(a.shape, a.dtype, rng) for a in info]
    reference = None
    note = "correctness not checked (off)"
    if req.check and outputs:
        try:
            args = req.candidate.reference_args()
            if arg_info(args) != info:
                raise ValueError(f"the reference's arguments {arg_info(args)} differ from the "
                                 f"candidate's {info}")
        except Exception as exc:  # noqa: BLE001 - reported in the note, as unchecked
            args = None
            note = f"no reference, correctness not checked: {type(exc).__name__}: {exc}"
        if args is not None:
            try:
                reference = _reference_by_build(req.candidate.target, args, inputs, outputs)
                note = "reference: naive schedule"
            except Exception as exc:  # noqa: BLE001 - fall back to the numpy oracle
                try:
                    reference = _reference_by_numpy(args, inputs, outputs)
                    note = f"reference: numpy evaluator (naive build failed: {exc})"
                except Exception as exc2:  # noqa: BLE001
                    note = f"no reference, correctness not checked: {exc2}"
    device = "cuda" if is_device_target(req.candidate.target) else "cpu"
    return RunSetup(tuple(inputs), outputs, None if reference is None else tuple(reference),
                    note, device)


def _reference_by_build(target: str, args: list, inputs: list[np.ndarray],
                        outputs: tuple[int, ...]) -> list[np.ndarray]:
    import templtune
    from templtune.te import create_schedule

    s = create_schedule([args[k].op for k in outputs])
    # NOTE: the naive schedule has no thread binding, so GPU tasks get their reference on the
    # host CPU.
    target = "llvm" if is_device_target(target) else target
    with _target_scope(templtune.target.Target(str(target))):
        module = templtune.build(s, list(args), target=target)
    arrays = [a.copy() for a in inputs]
    module(*arrays)
    return [arrays[k] for k in outputs]


def _reference_by_numpy(args: list, inputs: list[np.ndarray],
                        outputs: tuple[int, ...]) -> list[np.ndarray]:
    from templtune.te.evaluate import evaluate

    feeds = {args[k]: inputs[k] for k in range(len(args)) if k not in outputs}
    res = evaluate([args[k] for k in outputs], feeds)
    if isinstance(res, dict):
        return [np.asarray(res[args[k]]) for k in outputs]
    return [np.asarray(r) for r in res]


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """Install ``setup`` in the runner process under ``token``."""

    token: str
    setup: RunSetup


def load_run_state(req: LoadRequest) -> None:
    """Install one signature's buffers and reference in this runner process."""
    while len(_RUN) >= _MAX_STATES:
        del _RUN[next(iter(_RUN))]  # NOTE: oldest first; frees that signature's buffers
    _RUN[req.token] = req.setup


def has_run_state(token: str) -> bool:
    return token in _RUN


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
