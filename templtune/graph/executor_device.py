"""The graph runtime of a network built for a GPU: every tensor lives in device memory.

Parameters are uploaded once when the runtime is created; intermediate tensors share device
buffers (the host runtime's storage plan: a buffer is reused once every reader of its value
has run), and each kernel call is bound to its buffers (:func:`prepare`), so
``run()`` only queues launches: no tensor crosses to the host between kernels.
``set_input`` / ``get_output`` are the only copies. Whole runs and single groups are timed
between two CUDA events; on the CPU emulator (no GPU here) the same API runs, timed by the
host clock, and :attr:`DeviceGraphRuntime.timing` says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune.runtime.cuda.backend import EMULATOR, get_backend
from templtune.runtime.cuda.launcher import DeviceArray, prepare
from templtune.runtime.cuda.timing import measure_loop

from .build import GraphExecutorFactoryModule, input_vars
from .executor import BenchmarkResult, register_runtime
from .memory_plan import plan_storage, step_uses


class DeviceGraphRuntime:
    """Device buffers and bound kernel calls of one built network (``lib["default"](dev)``).

    Parameters
    ----------
    lib : GraphExecutorFactoryModule
        A network built for a GPU target.
    dev : Device, optional
        ``templtune.cuda(0)``; the CUDA runtime is the one :func:`get_backend` selects.
    """

    def __init__(self, lib: GraphExecutorFactoryModule, dev: Any = None) -> None:
        self.lib, self.dev = lib, dev
        be = self.backend = get_backend()
        self.timing = ("CPU timings of the CUDA emulator" if be.name == EMULATOR
                       else f"CUDA events ({be.name})")
        self.inputs = {v.name: DeviceArray(v.shape, v.dtype, be)
                       for v in input_vars(lib.func, lib.params)}
        env: dict[int, DeviceArray] = {}
        for v in lib.func.params:
            env[id(v)] = (DeviceArray.from_numpy(lib.params[v.name], be)
                          if v.name in lib.params else self.inputs[v.name])
        consts: dict[int, DeviceArray] = {}  # transformed weights, uploaded once each
        steps = [step for cg in lib.groups for step in cg.steps]
        # NOTE: no in-place writes here: a GPU kernel may store parts of its output before
        # every block has read the residual it would overwrite
        uses = step_uses(steps, inplace=False)
        storage = plan_storage(uses, keep=frozenset({id(lib.func.body)}))
        blocks = [DeviceArray((size,), "uint8", be) for size in storage.sizes]
        self.plan: list[Any] = []
        #: each call's output (an alias into a shared block), in call order
        self.step_outputs: list[DeviceArray] = []
        for step in steps:
            args = []
            for e in step.inputs:
                if isinstance(e, np.ndarray):
                    if id(e) not in consts:
                        consts[id(e)] = DeviceArray.from_numpy(e, be)
                    args.append(consts[id(e)])
                else:
                    args.append(env[id(e)])
            out = DeviceArray.alias(blocks[storage.block_of[id(step.output)]],
                                    step.output.shape, step.output.dtype)
            env[id(step.output)] = out
            self.step_outputs.append(out)
            self.plan.append(prepare(step.kernel, [*args, out], be))
        #: bytes of intermediate device storage after sharing, and without it
        self.storage_bytes = (storage.total, sum(u.nbytes for u in uses))
        # NOTE: the bound calls hold raw pointers: keep every buffer alive with the plan.
        self._buffers = [*env.values(), *consts.values(), *blocks]
        self.output = env[id(lib.func.body)]

    def _launch(self, calls: Any) -> None:
        for prep in calls:
            prep.launch_all()

    def run(self) -> None:
        self._launch(self.plan)
        self.backend.synchronize()

    def input_dtypes(self) -> dict[str, str]:
        return {k: str(v.dtype) for k, v in self.inputs.items()}

    def set_input(self, name: str, value: np.ndarray) -> None:
        buf = self.inputs[name]
        buf.copyfrom(np.ascontiguousarray(value, dtype=buf.dtype))

    def get_input(self, name: str) -> np.ndarray:
        return self.inputs[name].numpy()

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: v.shape for k, v in self.inputs.items()}

    def get_output(self) -> np.ndarray:
        return self.output.numpy()

    def _timed(self, calls: Any, n: int) -> float:
        def body() -> None:
            for _ in range(n):
                self._launch(calls)
        return float(self.backend.timed(body))

    def profile_groups(self, number: int) -> list[float]:
        """Seconds per call of each group's kernels (``number`` calls between two events,
        after one full run)."""
        self.run()
        out, k = [], 0
        for cg in self.lib.groups:
            calls = self.plan[k:k + len(cg.steps)]
            k += len(cg.steps)
            out.append(self._timed(calls, number) / number)
        return out

    def time_evaluator(self, func_name: str = "run", dev: Any = None, number: int = 1,
                       repeat: int = 1, min_repeat_ms: float = 0) -> Any:
        """Time ``run`` as TVM's ``module.module.time_evaluator("run", ...)``: one warm-up
        run, then ``repeat`` rounds of ``number`` runs between CUDA events, ``number`` grown
        until a round lasts ``min_repeat_ms``; returns ``f() -> BenchmarkResult``."""
        if func_name != "run":
            raise AttributeError(f"a graph runtime can time only 'run', not {func_name!r}")

        def evaluate() -> BenchmarkResult:
            res = measure_loop(lambda n: self._timed(self.plan, n), number, repeat,
                               min_repeat_ms)
            return BenchmarkResult(res.results, self.timing)

        return evaluate


register_runtime("gpu")(DeviceGraphRuntime)
