"""LLVM backend: loop IR -> LLVM IR text (:mod:`.render`) -> object code (:mod:`.compile`).

:func:`compile_func` returns the object code and a JSON-able header; the runtime turns them into a
callable :class:`templtune.runtime.Module` (see :func:`templtune.build`).
"""

from __future__ import annotations

from templtune.codegen.llvm.build import compile_func

__all__ = ["compile_func"]
