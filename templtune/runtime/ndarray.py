"""Thin device arrays and device handles (TVM's ``tvm.nd`` / ``tvm.cpu()``).

On the CPU an :class:`NDArray` is a numpy array in a wrapper; modules accept either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.errors import TargetError

__all__ = ["Device", "NDArray", "array", "empty", "cpu", "cuda", "device"]

_TYPES = {"cpu": 1, "llvm": 1, "cuda": 2, "gpu": 2}


@dataclass(frozen=True, slots=True)
class Device:
    """A device: ``kind`` ("cpu" or "cuda") and ``index``."""

    kind: str
    index: int = 0

    @property
    def device_type(self) -> int:
        return _TYPES[self.kind]

    @property
    def device_id(self) -> int:
        return self.index

    @property
    def exist(self) -> bool:
        return self.kind == "cpu" or _cuda_exists()

    def sync(self) -> None:
        """Wait for outstanding work (nothing to do on the CPU)."""

    def __str__(self) -> str:
        return f"{self.kind}({self.index})"


def _cuda_exists() -> bool:
    try:
        from templtune.runtime.cuda import device_exists  # type: ignore[attr-defined]
    except ImportError:
        return False
    return bool(device_exists())


def cpu(index: int = 0) -> Device:
    return Device("cpu", index)


def cuda(index: int = 0) -> Device:
    return Device("cuda", index)


def device(kind: Any, index: int = 0) -> Device:
    """``device("cpu")``, ``device("cuda", 1)``, by TVM type code (1 cpu, 2 cuda), or of a
    target: a Target, or a target string of which, as in TVM, only the first word counts
    (``device("llvm -mcpu=core-avx2")`` is the CPU)."""
    from templtune.target import Target, kind_of

    if isinstance(kind, int):
        kind = {1: "cpu", 2: "cuda"}.get(kind, str(kind))
    if isinstance(kind, Target):
        return Device("cuda" if kind.capabilities.is_gpu else "cpu", index)
    if kind not in _TYPES:
        try:
            kind = kind_of(str(kind))
        except TargetError:
            raise ValueError(f"unknown device {kind!r}") from None
        return device(Target(kind), index)
    return Device("cpu" if _TYPES[kind] == 1 else "cuda", index)


class NDArray:
    """An array on a device. On the CPU it wraps a C-contiguous numpy array (``_array``)."""

    __slots__ = ("_array", "device")

    def __init__(self, arr: np.ndarray, dev: Device | None = None) -> None:
        self._array = np.ascontiguousarray(arr)
        self.device = dev or cpu()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._array.shape)

    @property
    def dtype(self) -> str:
        return str(self._array.dtype)

    def numpy(self) -> np.ndarray:
        """A copy of the contents as a numpy array."""
        return self._array.copy()

    asnumpy = numpy

    def copyfrom(self, src: Any) -> NDArray:
        src = src.numpy() if isinstance(src, NDArray) else np.asarray(src)
        if src.shape != self._array.shape:
            raise ValueError(f"copyfrom: shape {src.shape} does not match {self._array.shape}")
        self._array[...] = src
        return self

    def copyto(self, target: Any) -> Any:
        if isinstance(target, Device):
            return NDArray(self._array.copy(), target)
        return target.copyfrom(self)

    def __repr__(self) -> str:
        return f"<NDArray {self.shape} {self.dtype} @{self.device}>\n{self._array!r}"


def array(arr: Any, dev: Device | None = None, *, device: Device | None = None) -> NDArray:
    """Copy ``arr`` (array-like) into a new NDArray on ``dev`` (default cpu); ``device=`` is
    TVM's keyword for the same argument."""
    a = arr.numpy() if isinstance(arr, NDArray) else np.array(arr)
    return NDArray(a, dev if dev is not None else device)


def empty(shape: Any, dtype: str = "float32", dev: Device | None = None, *,
          device: Device | None = None) -> NDArray:
    """An uninitialised NDArray (zero-filled on the CPU, for reproducibility)."""
    return NDArray(np.zeros(tuple(int(s) for s in shape), dt.to_numpy(dtype)),
                   dev if dev is not None else device)
