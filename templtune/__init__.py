"""templtune: a tensor-program auto-tuner (AutoTVM-style templates and an Ansor-style
auto-scheduler) with its own compiler, on x86 (LLVM) and NVIDIA GPUs (CUDA C).

The top-level names follow TVM's so that tutorials port by changing imports::

    from templtune import te, autotvm
    import templtune

Submodules are imported lazily so that ``import templtune`` stays cheap in worker processes.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = {
    "te", "topi", "autotvm", "auto_scheduler", "target", "schedule", "lower", "codegen", "runtime",
    "dtype", "errors", "templates", "nd", "graph", "config", "testing", "relay", "contrib",
    "tir",
}
# NOTE: TVM's names for the network layer: ``graph_executor`` and ``transform`` (PassContext);
# ``relay`` is a package of its own (templtune/relay) so that ``import templtune.relay.testing``
# works as ``import tvm.relay.testing`` does.
_ALIASES = {"graph_executor": "templtune.graph.executor",
            "transform": "templtune.graph.transform"}
_FUNCTIONS = {
    "build": ("templtune.build_module", "build"),
    "cpu": ("templtune.runtime.ndarray", "cpu"),
    "cuda": ("templtune.runtime.ndarray", "cuda"),
    "device": ("templtune.runtime.ndarray", "device"),
    # NOTE: TVM's older names: ``tvm.context`` for ``tvm.device``, ``tvm.gpu`` for ``tvm.cuda``.
    "context": ("templtune.runtime.ndarray", "device"),
    "gpu": ("templtune.runtime.ndarray", "cuda"),
}


def __getattr__(name: str) -> Any:
    if name == "lower":
        # ``templtune.lower`` is the loop-IR package; the package module is callable (see
        # templtune/lower/__init__.py), so ``templtune.lower(s, args)`` works as in TVM.
        return importlib.import_module("templtune.lower")
    if name == "nd":
        return importlib.import_module("templtune.runtime.ndarray")
    if name in _ALIASES:
        return importlib.import_module(_ALIASES[name])
    if name in _FUNCTIONS:
        mod_name, attr = _FUNCTIONS[name]
        return getattr(importlib.import_module(mod_name), attr)
    if name in _SUBMODULES:
        return importlib.import_module(f"templtune.{name}")
    raise AttributeError(f"module 'templtune' has no attribute {name!r}")
