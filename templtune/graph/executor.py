"""Run a built network: ``GraphModule(lib["default"](dev))`` with TVM's graph executor API.

``lib["default"](dev)`` creates the runtime registered for the built target's keys
(:func:`register_runtime`): :class:`GraphRuntime` on a CPU, the device runtime of
:mod:`templtune.graph.executor_device` on a GPU. The intermediate buffers are allocated once
when the runtime is created, values whose lifetimes do not overlap sharing storage
(:mod:`templtune.graph.memory_plan`), and the kernel calls are resolved to (kernel, arrays)
pairs then, so ``run()`` is a plain loop of native calls.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.runtime.aligned import view
from templtune.runtime.cuda.timing import TimeResult, measure_loop

from .build import GraphExecutorFactoryModule, _numpy, input_vars
from .memory_plan import View, allocate, pack_constants, plan_storage, step_uses, view_roots
from .op import GraphError

logger = logging.getLogger("templtune.graph")

RuntimeFactory = Callable[[GraphExecutorFactoryModule, Any], Any]
#: target key (``"cpu"``, ``"gpu"``) -> what creates the runtime of a network built for it
_RUNTIMES: dict[str, RuntimeFactory] = {}


def register_runtime(key: str) -> Callable[[RuntimeFactory], RuntimeFactory]:
    """Register the graph runtime of networks built for targets with key ``key``."""
    def deco(fn: RuntimeFactory) -> RuntimeFactory:
        _RUNTIMES[key] = fn
        return fn
    return deco


def create_runtime(lib: GraphExecutorFactoryModule, dev: Any = None) -> Any:
    """The runtime of ``lib`` on ``dev`` (``lib["default"](dev)``).

    Raises
    ------
    GraphError
        ``dev`` is not a device of the target the network was built for, or no runtime is
        registered for the target's keys.
    """
    from templtune.runtime.ndarray import device

    want = device(lib.target).kind
    kind = getattr(dev, "kind", None)
    if kind is not None and kind != want:
        raise GraphError(f"the network was built for {lib.target} and runs on a {want} device, "
                         f"not {dev}")
    for key in lib.target.capabilities.keys:
        fn = _RUNTIMES.get(key)
        if fn is not None:
            return fn(lib, dev)
    raise GraphError(f"no graph runtime is registered for target {lib.target} (keys "
                     f"{lib.target.capabilities.keys}; registered: {sorted(_RUNTIMES)})")


def _as_declared(kernel: Any, args: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """``args`` in the shapes ``kernel`` declares: an array whose parameter has the same
    elements in another constant shape is passed as a view (a pointwise conv over fused
    pixels declares its ``NCHW{c}c`` output as ``[N, C/c, H*W, c]``). Anything else is left
    for the kernel's own argument check."""
    params = getattr(kernel, "params", None)
    if not params or len(params) != len(args):
        return args
    out = []
    for a, p in zip(args, params):
        shape = tuple(p.shape)
        if (shape != a.shape and all(type(d) is int for d in shape) and a.flags.c_contiguous
                and int(np.prod(shape)) == a.size):
            a = a.reshape(shape)
        out.append(a)
    return tuple(out)


def _no_call() -> None:
    """A :class:`View` step's call: its output already is its input's memory."""


class GraphRuntime:
    """Buffers and the call plan of one built network on the host (``lib["default"](dev)``)."""

    #: what the timings of :meth:`time_evaluator` and :meth:`profile_groups` measure
    timing = "host wall clock"

    def __init__(self, lib: GraphExecutorFactoryModule, dev: Any = None) -> None:
        self.lib = lib
        self.inputs = {v.name: np.zeros(v.shape, dtype=v.dtype)
                       for v in input_vars(lib.func, lib.params)}
        env: dict[int, np.ndarray] = {id(v): self.inputs[v.name] for v in lib.func.params
                                      if v.name not in lib.params}
        bound = {id(v): lib.params[v.name] for v in lib.func.params if v.name in lib.params}
        steps = [step for cg in lib.groups for step in cg.steps]
        # NOTE: the constants (weights, pre-transformed ones among them) are copied side by
        # side in the order the run reads them into one 64-byte aligned array: the run
        # streams them like one array, and no vector load of a weight straddles two cache lines
        consts = [e if isinstance(e, np.ndarray) else bound[id(e)]
                  for step in steps for e in step.inputs
                  if isinstance(e, np.ndarray) or id(e) in bound]
        packed = {id(a): p for a, p in zip(consts, pack_constants(consts))}
        env.update({k: packed.get(id(a), a) for k, a in bound.items()})
        uses = step_uses(steps)
        roots = view_roots(steps)
        body = id(lib.func.body)
        storage = plan_storage(uses, keep=frozenset({roots.get(body, body)}))
        blocks = allocate(storage)
        self.plan: list[tuple[Any, tuple[np.ndarray, ...]]] = []
        for step in steps:
            out = step.output
            block = storage.block_of[roots.get(id(out), id(out))]
            buf = view(blocks[block], out.shape, out.dtype)
            env[id(out)] = buf
            args = tuple(packed[id(e)] if isinstance(e, np.ndarray) else env[id(e)]
                         for e in step.inputs) + (buf,)
            self.plan.append((step.kernel, _as_declared(step.kernel, args)))
        #: the plan's calls bound to their arrays (argument checks done once, here)
        bind = [getattr(k, "bind", None) for k, _ in self.plan]
        self.calls = [_no_call if isinstance(k, View) else
                      functools.partial(k, *a) if b is None else b(*a)
                      for b, (k, a) in zip(bind, self.plan)]
        #: bytes of intermediate storage after sharing, and without it
        self.storage_bytes = (storage.total, sum(u.nbytes for u in uses))
        self.output = env[id(lib.func.body)]

    def run(self) -> None:
        for call in self.calls:
            call()

    def set_input(self, name: str, value: np.ndarray) -> None:
        np.copyto(self.inputs[name], value, casting="same_kind")

    def get_input(self, name: str) -> np.ndarray:
        return self.inputs[name].copy()

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: v.shape for k, v in self.inputs.items()}

    def input_dtypes(self) -> dict[str, str]:
        return {k: str(v.dtype) for k, v in self.inputs.items()}

    def get_output(self) -> np.ndarray:
        return self.output.copy()

    def profile_groups(self, number: int) -> list[float]:
        """Median seconds per call of each group's kernels, timed in place over ``number``
        full runs after one warm-up run.

        Groups share storage, so a group is timed only where the run reaches it: its inputs
        are then the values it reads (a later group may since have written over them).
        """
        self.run()
        spans, j = [], 0
        for cg in self.lib.groups:
            spans.append(self.calls[j:j + len(cg.steps)])
            j += len(cg.steps)
        times: list[list[float]] = [[] for _ in spans]
        for _ in range(number):
            for calls, acc in zip(spans, times):
                t0 = time.perf_counter()
                for call in calls:
                    call()
                acc.append(time.perf_counter() - t0)
        return [float(np.median(t)) for t in times]

    def time_evaluator(self, func_name: str = "run", dev: Any = None, number: int = 1,
                       repeat: int = 1, min_repeat_ms: float = 0) -> Any:
        """Time ``run`` as TVM's ``module.module.time_evaluator("run", ...)`` does: one warm-up
        run, then ``repeat`` rounds of ``number`` runs, ``number`` grown until a round lasts
        ``min_repeat_ms``; returns ``f() -> BenchmarkResult`` (seconds per run per round)."""
        if func_name != "run":
            raise AttributeError(f"a graph runtime can time only 'run', not {func_name!r}")

        def batch(n: int) -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                self.run()
            return time.perf_counter() - t0

        return lambda: BenchmarkResult(measure_loop(batch, number, repeat, min_repeat_ms).results,
                                       self.timing)


register_runtime("cpu")(GraphRuntime)


@dataclass(frozen=True, slots=True)
class BenchmarkResult(TimeResult):
    """Seconds per run for each repeat (``GraphModule.benchmark``), printed as TVM does;
    ``timing`` says what was measured (``"CUDA events"``, or the emulator's CPU clock)."""

    timing: str = "host wall clock"

    def __str__(self) -> str:
        ms = np.array(self.results) * 1e3
        note = f" [{self.timing}]" if "emulator" in self.timing else ""
        return (f"Execution time summary{note}:\n"
                f"{'mean (ms)':>10} {'median (ms)':>12} {'max (ms)':>10} {'min (ms)':>10} "
                f"{'std (ms)':>10}\n"
                f"{ms.mean():10.4f} {np.median(ms):12.4f} {ms.max():10.4f} {ms.min():10.4f} "
                f"{ms.std():10.4f}")


class GraphModule:
    """TVM's ``graph_executor.GraphModule``: ``set_input``, ``run``, ``get_output``,
    ``benchmark``; ``module.module.time_evaluator("run", dev, ...)`` times whole runs."""

    def __init__(self, module: Any) -> None:
        if isinstance(module, GraphExecutorFactoryModule):
            module = module["default"]()
        if not callable(getattr(module, "profile_groups", None)):
            raise GraphError(f"GraphModule expects lib['default'](dev), got {type(module).__name__}")
        self.module = module

    def set_input(self, key: str | dict | None = None, value: Any = None, **params: Any) -> None:
        """Copy ``value`` into input ``key`` (or every ``name=value`` pair)."""
        items = dict(params)
        if isinstance(key, dict):
            items.update(key)
        elif key is not None:
            items[key] = value
        shapes = self.module.input_shapes()
        for name, val in items.items():
            shape = shapes.get(name)
            if shape is None:
                raise GraphError(f"the network has no input {name!r}; inputs: {sorted(shapes)}")
            arr = np.asarray(_numpy(val))
            if arr.shape != shape:
                raise GraphError(f"input {name!r} has shape {arr.shape}, expected {shape}")
            dtype = self.module.input_dtypes()[name]
            if not np.can_cast(arr.dtype, dtype, "same_kind"):
                # NOTE: float values into integer ids (or token ids as bools) would be silently
                # truncated
                raise GraphError(f"input {name!r} is {dtype}; got {arr.dtype} values")
            self.module.set_input(name, arr)

    def get_input(self, name: str) -> np.ndarray:
        return self.module.get_input(name)

    def run(self, **inputs: Any) -> None:
        if inputs:
            self.set_input(**inputs)
        self.module.run()

    def get_num_outputs(self) -> int:
        return 1

    def get_output(self, index: int = 0, out: Any = None) -> Any:
        """A copy of output ``index`` (a numpy array; written into ``out`` when given)."""
        if index != 0:
            raise IndexError(f"the network has 1 output, not index {index}")
        value = self.module.get_output()
        if out is not None:
            np.copyto(getattr(out, "_array", out), value)
            return out
        from templtune.runtime.ndarray import array

        return array(value)

    def _warn_emulated(self) -> None:
        if "emulator" in self.module.timing:
            logger.warning("timings of this network come from the CUDA emulator (%s), not "
                           "from a GPU", self.module.timing)

    def profile(self, number: int = 3) -> list[tuple[str, str, float]]:
        """Per fused group: ``(name, implementation, median seconds per call)`` (what TVM's
        debug executor reports), each group timed where ``number`` full runs on the current
        inputs reach it, after one warm-up run (with CUDA events on a GPU)."""
        self._warn_emulated()
        times = self.module.profile_groups(number)
        return [(cg.group.name, cg.impl, t) for cg, t in zip(self.module.lib.groups, times)]

    def benchmark(self, device: Any = None, func_name: str = "run", repeat: int = 5,
                  number: int = 5, min_repeat_ms: float = 0) -> BenchmarkResult:
        """Time whole runs: ``repeat`` rounds of ``number`` runs (seconds per run each)."""
        self._warn_emulated()
        return self.module.time_evaluator(func_name, device, number, repeat, min_repeat_ms)()


# NOTE: imported for its registration (key "gpu"); it needs the registry above.
from . import executor_device  # noqa: E402,F401
