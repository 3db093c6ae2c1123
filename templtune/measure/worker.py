"""Functions that run *inside* measurement worker processes (builders and the runner).

Everything crossing the process boundary is small and picklable: a :class:`TaskRef` (how to
re-create the task), config indices, exported module bytes, numpy arrays once per task, and plain
tuples back. Per-process caches live here; they are filled inside the worker, never inherited.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.errors import CodegenError, InstantiationError

from .measure import MeasureErrorNo


@dataclass(frozen=True, slots=True)
class TaskRef:
    """How a worker re-creates a task: unpickle ``pickled`` (the task pickled whole, which keeps
    its exact config space), or else import ``module`` (which registers the template) and call
    ``autotvm.task.create(name, args, target, target_host)``."""

    module: str | None
    name: str
    args: tuple
    target: str
    target_host: str | None = None
    pickled: bytes | None = None


def _template_module(task: Any) -> str | None:
    try:
        func = task.func
    except Exception:  # noqa: BLE001 - unknown template: no module to import
        return None
    for attr in ("fcustomized", "fcompute"):
        f = getattr(func, attr, None)
        if f is not None:
            return getattr(f, "__module__", None)
    return getattr(func, "__module__", None)


def task_ref(task: Any) -> TaskRef:
    """Describe ``task`` so that a worker process can re-create it."""
    import pickle

    target = getattr(task, "target", None)
    host = getattr(task, "target_host", None)
    pickled = None
    try:
        pickled = pickle.dumps(task)
    except Exception:  # noqa: BLE001 - closures/lambdas: re-create by name instead
        pickled = None
    return TaskRef(_template_module(task), str(task.name), _plain(task.args),
                   str(target) if target is not None else "llvm",
                   str(host) if host is not None else None, pickled)


def _plain(x: Any) -> Any:
    if isinstance(x, list | tuple):
        return tuple(_plain(v) for v in x)
    return x


_TASKS: dict[TaskRef, Any] = {}

# NOTE: modules a worker imports while it starts (launched early, alongside the other workers), so
# that the first candidate does not pay for importing the compiler and the runtime.
BUILD_PRELOAD = ("templtune", "templtune.measure.worker", "templtune.build_module",
                 "templtune.lower.lower_api", "templtune.codegen.llvm", "templtune.runtime.module")
RUN_PRELOAD = BUILD_PRELOAD  # the runner builds the naive-schedule reference too


def get_task(ref: TaskRef) -> Any:
    """The task described by ``ref`` (cached per worker process)."""
    task = _TASKS.get(ref)
    if task is not None:
        return task
    if ref.pickled is not None:
        import pickle

        try:
            task = pickle.loads(ref.pickled)
            _TASKS[ref] = task
            return task
        except Exception:  # noqa: BLE001 - fall back to re-creating it by name
            task = None
    if ref.module:
        name = ref.module
        if name == "__main__":
            # NOTE: spawn workers import the parent's main script as ``__mp_main__``.
            name = "__mp_main__"
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    error: Exception | None = None
    try:
        from templtune.autotvm.task import create

        kwargs = {"target_host": ref.target_host} if ref.target_host else {}
        task = create(ref.name, ref.args, ref.target, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported below
        error = exc
    if task is None:
        raise RuntimeError(f"cannot re-create task {ref.name!r} in a measurement worker: "
                           f"{error}") from error
    _TASKS[ref] = task
    return task


def _detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-4000:]}"


def _is_device(target: Any) -> bool:
    from templtune.target import capabilities

    return capabilities(target if target is not None else "llvm").is_gpu


def build_candidate(ref: TaskRef, index: int, build_kwargs: dict, env: Any = None) -> tuple:
    """Instantiate config ``index`` of the task and build it (under the parent's AutoTVM
    switches ``env``, a :func:`templtune.autotvm.env.snapshot`).

    Returns ``(error_no, artifact_bytes_or_None, error_detail, seconds)``; never raises for a bad
    candidate. Error codes are chosen by exception type.
    """
    t0 = time.perf_counter()
    target = ref.target
    if env is not None:
        from templtune.autotvm.env import restore

        restore(env)
    try:
        task = get_task(ref)
        target = task.target
        try:
            config = task.config_space.get(index)
        except IndexError as exc:
            raise InstantiationError(f"config index {index} is not in the space: {exc}") from exc
        import templtune

        with _target_scope(target):
            s, args = task.instantiate(config)
            if not config.valid():
                raise InstantiationError("; ".join(str(e) for e in config.errors) or "invalid")
            module = templtune.build(s, args, target=target, **build_kwargs)
        artifact = export_module(module)
        return (int(MeasureErrorNo.NO_ERROR), artifact, "", time.perf_counter() - t0)
    except InstantiationError as exc:
        code = MeasureErrorNo.INSTANTIATION_ERROR
        detail = _detail(exc)
    except CodegenError as exc:
        code = MeasureErrorNo.COMPILE_DEVICE if _is_device(target) else MeasureErrorNo.COMPILE_HOST
        detail = _detail(exc)
    except Exception as exc:  # noqa: BLE001 - any other failure is a host compile error
        code = MeasureErrorNo.COMPILE_HOST
        detail = _detail(exc)
    return (int(code), None, detail, time.perf_counter() - t0)


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

@dataclass
class _RunState:
    inputs: list[np.ndarray]
    outputs: list[int]              # positions of output buffers in the argument list
    reference: list[np.ndarray] | None
    device: str


_RUN: dict[str, _RunState] = {}


def _as_int(x: Any) -> int:
    return int(getattr(x, "value", x))


def _random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, size=shape).astype(np_dtype)
    if np_dtype.kind in "iu":
        return rng.integers(0, 8, size=shape).astype(np_dtype)
    if np_dtype.kind == "b":
        return rng.random(size=shape) < 0.5
    return np.zeros(shape, dtype=np_dtype)


def prepare_run(ref: TaskRef, seed: int, ref_input: list | None, check: bool) -> dict:
    """Set up a task in the runner process: argument buffers, random inputs, reference outputs.

    The reference is the task's outputs built with the naive schedule
    (``create_schedule([out.op ...])``), falling back to the numpy evaluator.
    """
    from templtune.te.tensor import PlaceholderOp

    task = get_task(ref)
    space = task.config_space
    args = None
    last: Exception | None = None
    for index in _first_valid(space, 8):
        try:
            with _target_scope(task.target):
                _, args = task.instantiate(space.get(index))
            break
        except Exception as exc:  # noqa: BLE001 - try the next config
            last = exc
    if args is None:
        raise RuntimeError(f"cannot instantiate any config of {ref.name} to get its arguments: "
                           f"{last}")
    rng = np.random.default_rng(seed)
    outputs = [k for k, t in enumerate(args) if not isinstance(t.op, PlaceholderOp)]
    if ref_input is not None:
        inputs = [np.array(a, copy=True) for a in ref_input]
    else:
        inputs = []
        for k, t in enumerate(args):
            shape = tuple(_as_int(s) for s in t.shape)
            if k in outputs:
                inputs.append(np.zeros(shape, dtype=np.dtype(t.dtype)))
            else:
                inputs.append(_random_array(shape, t.dtype, rng))
    reference = None
    note = ""
    if check and outputs:
        try:
            reference = _reference_by_build(task, args, inputs, outputs)
            note = "reference: naive schedule"
        except Exception as exc:  # noqa: BLE001 - fall back to the numpy oracle
            try:
                reference = _reference_by_numpy(args, inputs, outputs)
                note = f"reference: numpy evaluator (naive build failed: {exc})"
            except Exception as exc2:  # noqa: BLE001
                note = f"no reference, correctness not checked: {exc2}"
    device = "cuda" if _is_device(task.target) else "cpu"
    return {"inputs": inputs, "outputs": outputs, "reference": reference, "note": note,
            "device": device}


def _first_valid(space: Any, n: int) -> list[int]:
    out = []
    for i in range(space.range_length):
        if space.is_index_valid(i):
            out.append(i)
            if len(out) >= n:
                break
    return out


def _reference_by_build(task: Any, args: list, inputs: list[np.ndarray],
                        outputs: list[int]) -> list[np.ndarray]:
    import templtune
    from templtune.te import create_schedule

    s = create_schedule([args[k].op for k in outputs])
    # NOTE: the naive schedule has no thread binding, so GPU tasks get their reference on the
    # host CPU.
    target = "llvm" if _is_device(task.target) else task.target
    with _target_scope(templtune.target.Target(str(target))):
        module = templtune.build(s, list(args), target=target)
    arrays = [a.copy() for a in inputs]
    module(*arrays)
    return [arrays[k] for k in outputs]


def _reference_by_numpy(args: list, inputs: list[np.ndarray],
                        outputs: list[int]) -> list[np.ndarray]:
    from templtune.te.evaluate import evaluate

    feeds = {args[k]: inputs[k] for k in range(len(args)) if k not in outputs}
    res = evaluate([args[k] for k in outputs], feeds)
    if isinstance(res, dict):
        return [np.asarray(res[args[k]]) for k in outputs]
    return [np.asarray(r) for r in res]


def load_run_state(token: str, inputs: list, outputs: list[int], reference: list | None,
                   device: str) -> None:
    """Install a task's buffers and reference in this runner process."""
    _RUN.clear()  # NOTE: one task at a time; frees the previous task's buffers
    _RUN[token] = _RunState(list(inputs), list(outputs), reference, device)


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


def run_candidate(token: str, artifact: bytes, number: int, repeat: int, min_repeat_ms: float,
                  flush: bool, check: bool, rtol: float, atol: float,
                  timeout: float | None = None) -> tuple:
    """Load, check and time one built candidate.

    The first call checks the outputs (when ``check``) and serves as a probe: if it shows that
    the timing rounds cannot finish within ``timeout``, the candidate is reported as
    ``RUN_TIMEOUT`` at once instead of after waiting for the timeout (templtune shortcut).

    Returns ``(error_no, costs, detail)``.
    """
    import templtune

    t_start = time.perf_counter()
    _pin_scratch_allocator()
    st = _RUN[token]
    module = load_artifact(artifact)
    dev = templtune.cuda() if st.device == "cuda" else templtune.cpu()
    arrays = [a.copy() for a in st.inputs]
    t0 = time.perf_counter()
    module(*arrays)
    first = time.perf_counter() - t0
    if check and st.reference is not None:
        for pos, original in enumerate(st.inputs):
            if pos not in st.outputs and not np.array_equal(arrays[pos], original,
                                                            equal_nan=original.dtype.kind == "f"):
                return (int(MeasureErrorNo.WRONG_ANSWER), (),
                        f"the candidate overwrote input buffer {pos}")
        for pos, ref in zip(st.outputs, st.reference):
            got = np.asarray(arrays[pos])
            if not _close(got, ref, rtol, atol):
                err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
                return (int(MeasureErrorNo.WRONG_ANSWER), (),
                        f"output {pos} differs from the reference (max abs error {err:.3g})")
    if timeout is not None:
        predicted = first * (1 + number * repeat) + repeat * min_repeat_ms / 1e3
        if time.perf_counter() - t_start + predicted > timeout:
            return (int(MeasureErrorNo.RUN_TIMEOUT), (),
                    f"one call takes {first:.3g} s: {number}x{repeat} timed calls cannot finish "
                    f"within the {timeout} s timeout")
    kwargs: dict[str, Any] = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms}
    # NOTE: the checking/probing call above already ran the kernel on these very arrays (caches,
    # page faults, thread pool warm), so the evaluator's own warm-up call would only repeat it.
    extras: dict[str, Any] = {"warmup": 0}
    if flush:
        extras["enable_cpu_cache_flush"] = True
    entry = getattr(module, "entry_name", None) or "default_function"
    try:
        timer = module.time_evaluator(entry, dev, **kwargs, **extras)
    except TypeError:
        # a module type without these options (e.g. CUDA): its own defaults
        timer = module.time_evaluator(entry, dev, **kwargs)
    res = timer(*arrays)
    costs = tuple(float(c) for c in getattr(res, "results", res))
    return (int(MeasureErrorNo.NO_ERROR), costs, "")


def _close(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> bool:
    if got.shape != ref.shape:
        return False
    if ref.dtype.kind == "f":
        scale = float(np.max(np.abs(ref))) if ref.size else 1.0
        return bool(np.allclose(got, ref, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True))
    return bool(np.array_equal(got, ref))
