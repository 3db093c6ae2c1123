"""Runtime: callable modules, time evaluators, export/load, device arrays."""

from __future__ import annotations

from templtune.runtime.module import Module, ProfileResult, load_module
from templtune.runtime.ndarray import NDArray, cpu, cuda, device

__all__ = ["Module", "ProfileResult", "load_module", "NDArray", "cpu", "cuda", "device"]
