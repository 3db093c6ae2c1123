"""Run and time a :class:`~templtune.runtime.cuda.module.CudaModule` through a backend.

Arguments are numpy arrays (copied to the device, and every one copied back after the run, as
the kernels may write any of them) or :class:`DeviceArray` objects (already on the device).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.errors import RuntimeCallError
from templtune.runtime.cuda.backend import CudaBackend, get_backend
from templtune.runtime.cuda.timing import TimeResult, measure_loop


class DeviceArray:
    """A device buffer with a numpy shape and dtype; ``numpy()`` copies it back."""

    def __init__(self, shape: tuple[int, ...], dtype: str | np.dtype,
                 backend: CudaBackend | None = None, base: DeviceArray | None = None) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        #: the array whose allocation this one aliases (None: it owns its own)
        self.base = base
        if base is None:
            self.backend = backend or get_backend()
            self.ptr = self.backend.alloc(self.nbytes)
            return
        if self.nbytes > base.nbytes:
            raise RuntimeCallError(f"alias of {self.nbytes} bytes over a {base.nbytes}-byte "
                                   "device allocation")
        self.backend, self.ptr = base.backend, base.ptr

    @classmethod
    def alias(cls, base: DeviceArray, shape: tuple[int, ...], dtype: str | np.dtype
              ) -> DeviceArray:
        """A ``shape`` / ``dtype`` array at the start of ``base``'s allocation (which it
        keeps alive and never frees): storage shared by values not live at once."""
        return cls(shape, dtype, base=base)

    @classmethod
    def from_numpy(cls, arr: np.ndarray, backend: CudaBackend | None = None) -> DeviceArray:
        out = cls(arr.shape, arr.dtype, backend)
        out.backend.htod(out.ptr, np.ascontiguousarray(arr))
        return out

    def copyfrom(self, arr: np.ndarray) -> DeviceArray:
        if tuple(arr.shape) != self.shape or arr.dtype != self.dtype:
            raise RuntimeCallError(f"copyfrom: expected {self.shape} {self.dtype}, got "
                                   f"{arr.shape} {arr.dtype}")
        self.backend.htod(self.ptr, np.ascontiguousarray(arr))
        return self

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        self.backend.dtoh(out, self.ptr)
        return out

    def __del__(self) -> None:
        if getattr(self, "base", None) is not None:
            return
        try:
            self.backend.free(self.ptr)
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass


class _Prepared:
    """Device copies of a call's arguments and workspace, plus the loaded kernels."""

    def __init__(self, module: Any, args: Sequence[Any], backend: CudaBackend) -> None:
        self.be = backend
        if len(args) != len(module.params):
            raise RuntimeCallError(f"{module.entry_name} expects {len(module.params)} arguments "
                                   f"({', '.join(p.name for p in module.params)}), got {len(args)}")
        self.temps: list[DeviceArray] = []
        env: dict[str, int] = {}  # shape variables bound from the arguments
        where: dict[str, tuple[str, int]] = {}
        self.host: list[tuple[Any, DeviceArray]] = []
        ptrs = []
        for p, a in zip(module.params, args):
            want = dt.to_numpy(p.dtype)
            if isinstance(a, DeviceArray):
                dev = a
            else:
                arr = getattr(a, "numpy", None)
                host = arr() if callable(arr) and not isinstance(a, np.ndarray) else a
                if not isinstance(host, np.ndarray):
                    raise RuntimeCallError(f"argument {p.name}: expected an array, got "
                                           f"{type(a).__name__}")
                dev = DeviceArray.from_numpy(host, backend)
                self.temps.append(dev)
                if isinstance(a, np.ndarray) or callable(getattr(a, "copyfrom", None)):
                    self.host.append((a, dev))
            if dev.dtype != want:
                raise RuntimeCallError(f"argument {p.name}: dtype {dev.dtype}, expected {want}")
            if all(type(d) is int for d in p.shape):
                if -1 not in p.shape and tuple(dev.shape) != tuple(p.shape) and \
                        int(np.prod(dev.shape)) != int(np.prod(p.shape)):
                    raise RuntimeCallError(f"argument {p.name}: shape {dev.shape}, expected "
                                           f"{p.shape}")
            else:
                _bind_shape(module.entry_name, p.name, p.shape, dev.shape, env, where)
            ptrs.append(dev.ptr)
        for w in module.workspace:
            dev = DeviceArray(w.shape, dt.to_numpy(w.dtype), backend)
            self.temps.append(dev)
            ptrs.append(dev.ptr)
        self.ptrs = ptrs
        self.env = env
        handle = getattr(module, "_loaded", {}).get(backend.name)
        if handle is None:
            handle = backend.load(module)
            loaded = getattr(module, "_loaded", None)
            if loaded is None:
                loaded = {}
                module._loaded = loaded
            loaded[backend.name] = handle
        self.calls = [(backend.function(handle, s.name), s, _grid(s, env),
                       [np.dtype(dt.to_numpy(d)).type(env[n]) for n, d in s.scalars])
                      for s in module.launches]

    def launch_all(self) -> None:
        for fn, s, grid, scalars in self.calls:
            if not grid[0]:
                continue  # a symbolic launch over empty arrays
            if scalars:
                self.be.launch(fn, grid, s.block, [self.ptrs[i] for i in s.args], 0, scalars)
            else:
                self.be.launch(fn, grid, s.block, [self.ptrs[i] for i in s.args], 0)

    def copy_back(self) -> None:
        for host, dev in self.host:
            if isinstance(host, np.ndarray):
                self.be.dtoh(host, dev.ptr)
            else:  # a host-backed array object (templtune.nd.NDArray)
                host.copyfrom(dev.numpy())


def _bind_shape(entry: str, name: str, want: tuple[int | str, ...], got: tuple[int, ...],
                env: dict[str, int], where: dict[str, tuple[str, int]]) -> None:
    """Bind the shape variables of one argument, checking it against the earlier ones."""
    if len(got) != len(want):
        raise RuntimeCallError(f"argument {name} of {entry}: shape {got} has {len(got)} "
                               f"dimensions, expected {len(want)} {want}")
    for ax, (w, g) in enumerate(zip(want, got)):
        if isinstance(w, str):
            if env.setdefault(w, g) != g:
                other, ax0 = where[w]
                if other == name:
                    raise RuntimeCallError(f"argument {name} of {entry} has shape {got}, but its "
                                           f"axes {ax0} and {ax} are both {w}")
                raise RuntimeCallError(f"arguments {other} and {name} of {entry} disagree on "
                                       f"{w}: {other}.shape[{ax0}] = {env[w]} but "
                                       f"{name}.shape[{ax}] = {g}")
            where.setdefault(w, (name, ax))
        elif w != -1 and w != g:
            raise RuntimeCallError(f"argument {name} of {entry}: shape {got}, expected {want} "
                                   f"(mismatch on axis {ax})")


def _grid(s: Any, env: dict[str, int]) -> tuple[int, int, int]:
    """The launch grid of ``s`` with its symbolic dimensions evaluated."""
    if all(type(g) is int for g in s.grid):
        return s.grid  # type: ignore[no-any-return]
    from templtune.te.const_eval import eval_const
    from templtune.te.functor import collect_vars

    out = []
    for g in s.grid:
        if type(g) is not int:
            g = int(eval_const(g, {v: env[v.name] for v in collect_vars(g)}))
            if g < 1:  # an empty array: nothing to launch; CUDA refuses a zero grid
                return (0, 0, 0)
        out.append(g)
    return tuple(out)  # type: ignore[return-value]
def prepare(module: Any, args: Sequence[DeviceArray], backend: CudaBackend | None = None
            ) -> _Prepared:
    """``module`` loaded and bound to device arrays ``args`` (its workspace allocated once):
    ``launch_all()`` then queues its kernels without copies (what a graph runtime replays)."""
    return _Prepared(module, args, backend or get_backend())


def run(module: Any, args: Sequence[Any], backend: CudaBackend | None = None) -> None:
    """Launch every kernel of ``module`` once over ``args`` and wait for them."""
    be = backend or get_backend()
    prep = _Prepared(module, args, be)
    prep.launch_all()
    be.synchronize()
    prep.copy_back()


def time_evaluator(module: Any, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0,
                   backend: CudaBackend | None = None) -> Any:
    """A callable ``f(*args) -> TimeResult`` timing ``module`` with CUDA events."""

    def evaluate(*args: Any) -> TimeResult:
        be = backend or get_backend()
        prep = _Prepared(module, args, be)

        def batch(n: int) -> float:
            def body() -> None:
                for _ in range(n):
                    prep.launch_all()
            return be.timed(body)

        res = measure_loop(batch, number, repeat, min_repeat_ms)
        prep.copy_back()
        return res

    return evaluate
