"""Run a built network: ``GraphModule(lib["default"](dev))`` with TVM's graph executor API.

Every intermediate buffer is allocated once when the runtime is created, and the kernel calls
are resolved to (kernel, arrays) pairs then, so ``run()`` is a plain loop of native calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.runtime.cuda.timing import TimeResult, measure_loop

from .build import GraphExecutorFactoryModule, _numpy, input_vars
from .op import GraphError


class GraphRuntime:
    """Buffers and the call plan of one built network (``lib["default"](dev)``)."""

    def __init__(self, lib: GraphExecutorFactoryModule) -> None:
        self.lib = lib
        self.inputs = {v.name: np.zeros(v.shape, dtype=v.dtype)
                       for v in input_vars(lib.func, lib.params)}
        env: dict[int, np.ndarray] = {}
        for v in lib.func.params:
            env[id(v)] = lib.params[v.name] if v.name in lib.params else self.inputs[v.name]
        self.plan: list[tuple[Any, tuple[np.ndarray, ...]]] = []
        for cg in lib.groups:
            for step in cg.steps:
                out = step.output
                buf = np.empty(out.shape, dtype=out.dtype)
                env[id(out)] = buf
                args = tuple(e if isinstance(e, np.ndarray) else env[id(e)]
                             for e in step.inputs) + (buf,)
                self.plan.append((step.kernel, args))
        self.output = env[id(lib.func.body)]

    def run(self) -> None:
        for kernel, args in self.plan:
            kernel(*args)

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

        return lambda: BenchmarkResult(measure_loop(batch, number, repeat, min_repeat_ms).results)


@dataclass(frozen=True, slots=True)
class BenchmarkResult(TimeResult):
    """Seconds per run for each repeat (``GraphModule.benchmark``), printed as TVM does."""

    def __str__(self) -> str:
        ms = np.array(self.results) * 1e3
        return ("Execution time summary:\n"
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
        if not isinstance(module, GraphRuntime):
            raise GraphError(f"GraphModule expects lib['default'](dev), got {type(module).__name__}")
        self.module = module

    def set_input(self, key: str | dict | None = None, value: Any = None, **params: Any) -> None:
        """Copy ``value`` into input ``key`` (or every ``name=value`` pair)."""
        items = dict(params)
        if isinstance(key, dict):
            items.update(key)
        elif key is not None:
            items[key] = value
        for name, val in items.items():
            buf = self.module.inputs.get(name)
            if buf is None:
                raise GraphError(f"the network has no input {name!r}; inputs: "
                                 f"{sorted(self.module.inputs)}")
            arr = np.asarray(_numpy(val))
            if arr.shape != buf.shape:
                raise GraphError(f"input {name!r} has shape {arr.shape}, expected {buf.shape}")
            np.copyto(buf, arr, casting="same_kind")

    def get_input(self, name: str) -> np.ndarray:
        return self.module.inputs[name].copy()

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
        if out is not None:
            np.copyto(getattr(out, "_array", out), self.module.output)
            return out
        from templtune.runtime.ndarray import array

        return array(self.module.output.copy())

    def profile(self, number: int = 3) -> list[tuple[str, str, float]]:
        """Per fused group: ``(name, implementation, median seconds per call)`` (what TVM's
        debug executor reports), each group timed over ``number`` calls on the current
        inputs after one full warm-up run."""
        self.module.run()
        out = []
        plan = iter(self.module.plan)
        for cg in self.module.lib.groups:
            calls = [next(plan) for _ in cg.steps]
            times = []
            for _ in range(number):
                t0 = time.perf_counter()
                for kernel, args in calls:
                    kernel(*args)
                times.append(time.perf_counter() - t0)
            out.append((cg.group.name, cg.impl, float(np.median(times))))
        return out

    def benchmark(self, device: Any = None, func_name: str = "run", repeat: int = 5,
                  number: int = 5, min_repeat_ms: float = 0) -> BenchmarkResult:
        """Time whole runs: ``repeat`` rounds of ``number`` runs (seconds per run each)."""
        return self.module.time_evaluator(func_name, device, number, repeat, min_repeat_ms)()
