"""Test helpers under TVM's names (``tvm.testing``), so that ``import tvm.testing`` ports as
``import templtune.testing``.

``assert_allclose`` is what the tutorials call; the target helpers (``enabled_targets``,
``device_enabled``, ``requires_gpu`` ...) are what TVM's own tests and several tutorials use to
skip GPU cells on machines without one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = ["assert_allclose", "device_enabled", "enabled_targets", "requires_cuda",
           "requires_gpu", "requires_llvm"]

F = TypeVar("F", bound=Callable[..., Any])


def _as_numpy(x: Any) -> np.ndarray:
    # NOTE: device arrays (templtune's NDArray, a CUDA DeviceArray) expose ``numpy()``.
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return np.asarray(x.numpy())
    return np.asanyarray(x)


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """``np.testing.assert_allclose`` with TVM's defaults (``rtol = atol = 1e-7``) and a shape check.

    Parameters
    ----------
    actual, desired
        Arrays (numpy arrays, templtune NDArrays, scalars or nested lists). They are not
        interchangeable: ``|actual - desired| <= atol + rtol * |desired|`` is checked.
    rtol, atol
        Relative and absolute tolerance.

    Raises
    ------
    AssertionError
        If the shapes differ (no broadcasting, unlike numpy's function) or any element is out of
        tolerance.
    """
    a, d = _as_numpy(actual), _as_numpy(desired)
    if a.shape != d.shape:
        raise AssertionError(f"shapes differ: actual {a.shape}, desired {d.shape}")
    np.testing.assert_allclose(a, d, rtol=rtol, atol=atol, verbose=True)


def device_enabled(target: Any) -> bool:
    """Whether ``target`` (a target string such as ``"llvm"`` / ``"cuda -arch=sm_80"``, or a
    Target) can run on this machine: the CPU always, CUDA when a GPU is present."""
    from templtune.target import Target, capabilities

    try:
        caps = capabilities(target if isinstance(target, Target) else Target(str(target)))
    except Exception:  # noqa: BLE001 - a target this build does not know cannot run here
        return False
    if not caps.is_gpu:
        return True
    from templtune.runtime.ndarray import cuda

    return bool(cuda().exist)


def enabled_targets() -> list[tuple[str, Any]]:
    """``[(target, device), ...]`` for the targets that can run here, as TVM's ``enabled_targets``."""
    from templtune.runtime.ndarray import cpu, cuda

    out: list[tuple[str, Any]] = [("llvm", cpu(0))]
    if device_enabled("cuda"):
        out.append(("cuda", cuda(0)))
    return out


def _skip_unless(cond: Callable[[], bool], reason: str) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        import pytest

        return pytest.mark.skipif(not cond(), reason=reason)(fn)  # type: ignore[no-any-return]

    return deco


requires_llvm = _skip_unless(lambda: True, "needs LLVM")
requires_cuda = _skip_unless(lambda: device_enabled("cuda"), "needs a CUDA GPU")
requires_gpu = requires_cuda

