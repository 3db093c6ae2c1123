"""The LLVM backend's :class:`~templtune.codegen.registry.Codegen` and ``compile_func``: one
PrimFunc to object code plus the header the runtime needs."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from templtune import config
from templtune.codegen.llvm import compile as cc
from templtune.codegen.llvm import pool
from templtune.codegen.llvm.render import RenderedModule, render
from templtune.codegen.registry import Codegen, register_codegen
from templtune.lower.ir import PrimFunc

log = logging.getLogger("templtune.codegen.llvm")


def make_header(rendered: RenderedModule, spec: cc.MachineSpec) -> dict[str, Any]:
    """The JSON-able description of a compiled module (signature, machine, IR text)."""
    return {
        "entry": rendered.entry,
        "params": [{"name": p.name, "dtype": p.dtype, "shape": list(p.shape)}
                   for p in rendered.params],
        "shape_vars": [list(x) for x in rendered.shape_vars],
        "parallel": rendered.parallel,
        "pool": rendered.runtime.value,
        "spec": {"triple": spec.triple, "cpu": spec.cpu, "features": spec.features,
                 "opt_level": spec.opt_level},
        "ir": rendered.ir,
    }


@dataclass(frozen=True, slots=True)
class LLVMSource:
    """Rendered LLVM IR of one function and the machine it is compiled for."""

    rendered: RenderedModule
    spec: cc.MachineSpec


@dataclass(frozen=True, slots=True)
class LLVMArtifact:
    """Object code and its header (see :func:`make_header`): what the runtime loads."""

    obj: bytes
    header: dict[str, Any]


@register_codegen("llvm")
class LLVMCodegen(Codegen):
    """Loop IR -> LLVM IR text (verified) -> object code for the host or ``-mtriple``."""

    def render(self, func: PrimFunc, target: Any, name: str | None = None) -> LLVMSource:
        spec = cc.machine_spec(target)
        attrs = getattr(target, "attrs", {}) or {}
        rendered = render(func, name=name, runtime=pool.parallel_runtime(spec),
                          num_threads=int(attrs.get("num-cores", 0) or 0), x86=spec.is_x86)
        if config.get("TEMPLTUNE_DEBUG"):
            log.debug("LLVM IR of %s:\n%s", rendered.entry, rendered.ir)
        return LLVMSource(rendered, spec)

    def compile(self, rendered: LLVMSource, target: Any,
                timings: dict[str, float] | None = None) -> LLVMArtifact:
        obj = cc.compile_ir(rendered.rendered.ir, rendered.spec, timings)
        return LLVMArtifact(obj, make_header(rendered.rendered, rendered.spec))


def compile_func(func: PrimFunc, target: Any = None, name: str | None = None,
                 timings: dict[str, float] | None = None) -> tuple[bytes, dict[str, Any]]:
    """Render, verify, optimise and compile ``func`` for an ``llvm`` target.

    Parameters
    ----------
    func : PrimFunc
        Lowered loop IR.
    target : Target, optional
        An llvm target (``-mcpu``, ``-mattr``, ``-mtriple``, ``-num-cores``, ``-opt-level``).
    name : str, optional
        Symbol name of the entry function (default ``func.name``).
    timings : dict, optional
        Filled with seconds per phase: ``render``, ``parse_verify``, ``optimise``, ``codegen``.

    Returns
    -------
    (bytes, dict)
        Object code and its header (see :func:`make_header`).
    """
    cg = LLVMCodegen()
    t0 = time.perf_counter()
    src = cg.render(func, target, name)
    t1 = time.perf_counter()
    art = cg.compile(src, target, timings)
    if timings is not None:
        timings["render"] = t1 - t0
    return art.obj, art.header
