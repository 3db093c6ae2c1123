"""Modules as files the system toolchain understands (TVM's ``save`` / ``export_library``).

* ``Module.save("f.o")`` writes a relocatable ELF object: the kernel's code (what llvmlite
  emitted) plus the module's description as the data symbol ``__templtune_module_blob``.
* ``Module.export_library("f.so")`` links that into a shared library with the C compiler
  (``gcc -shared``), with a copy of templtune's thread pool when the kernel has parallel
  loops (against libgomp for a kernel built with ``TEMPLTUNE_THREAD_POOL=gomp``).
* :func:`load_shared` re-creates a :class:`Module` from such a library, whoever linked it (e.g.
  ``contrib.cc.create_shared`` on a saved ``.o``, as TVM's TE tutorial does): it opens the
  library and reads the blob. The library's functions can also be called directly with ctypes
  (``lib.<entry>(pointers..., shape ints...)``).

``save`` also writes ``.ll`` (the LLVM IR) and ``.s`` (assembly) as TVM does.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from templtune.codegen.llvm.abi import ParallelRuntime
from templtune.errors import CodegenError

if TYPE_CHECKING:
    from templtune.runtime.module import Module

__all__ = ["export_library", "load_shared", "save"]

BLOB_SYMBOL = "__templtune_module_blob"
SIZE_SYMBOL = "__templtune_module_size"


def _cc() -> str:
    from templtune import config

    for name in (config.get("CC"), "gcc", "cc", "clang"):
        if name and shutil.which(name):
            return name
    raise CodegenError("no C compiler found (tried $CC, gcc, cc, clang) to write an object file")


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CodegenError(f"{what} failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")


def _blob_object(blob: bytes, tmp: str) -> str:
    """An object file defining the blob and its size as data symbols (assembled with .incbin,
    so the bytes never pass through a C literal)."""
    data = os.path.join(tmp, "blob.bin")
    with open(data, "wb") as f:
        f.write(blob)
    asm = os.path.join(tmp, "blob.S")
    with open(asm, "w") as f:
        f.write(f"""    .section .rodata
    .globl {BLOB_SYMBOL}
    .type {BLOB_SYMBOL}, @object
    .balign 16
{BLOB_SYMBOL}:
    .incbin "{data}"
    .size {BLOB_SYMBOL}, {len(blob)}
    .globl {SIZE_SYMBOL}
    .type {SIZE_SYMBOL}, @object
    .balign 8
{SIZE_SYMBOL}:
    .quad {len(blob)}
    .size {SIZE_SYMBOL}, 8
    .section .note.GNU-stack,"",@progbits
""")
    out = os.path.join(tmp, "blob.o")
    _run([_cc(), "-c", "-fPIC", "-o", out, asm], "assembling the module description")
    return out


def _objects(mod: Module, tmp: str) -> list[str]:
    code = os.path.join(tmp, "code.o")
    with open(code, "wb") as f:
        f.write(mod._obj)
    objs = [code, _blob_object(mod.export(), tmp)]
    if mod._runtime is ParallelRuntime.POOL:
        # the library carries its own copy of the thread pool its kernels call
        from templtune.codegen.llvm.pool import pool_object

        objs.append(os.path.join(tmp, "pool.o"))
        with open(objs[-1], "wb") as f:
            f.write(pool_object(mod._spec))
    return objs


def save(mod: Module, path: str, fmt: str = "") -> None:
    """Write ``mod`` to ``path`` as ``fmt`` (default: from the extension): ``o`` (relocatable
    object with the module description), ``ll`` (LLVM IR) or ``s`` (assembly)."""
    fmt = (fmt or os.path.splitext(path)[1].lstrip(".")).lower()
    if fmt in ("ll", "s", "asm"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(mod.get_source("ll" if fmt == "ll" else "asm"))
        return
    if fmt != "o":
        raise ValueError(f"cannot save a module as {fmt!r}; use .o, .ll or .s")
    with tempfile.TemporaryDirectory(prefix="templtune_save_") as tmp:
        # NOTE: one relocatable object (ld -r), so that linking the saved file alone gives a
        # library load_module can read
        _run([_cc(), "-r", "-nostdlib", "-o", os.fspath(path), *_objects(mod, tmp)],
             "writing the object file")


def _gomp_flags() -> list[str]:
    from templtune.codegen.llvm.compile import find_libgomp

    path = find_libgomp()
    if path is None:
        return []
    if os.path.isabs(path):
        return [path, f"-Wl,-rpath,{os.path.dirname(path)}"]
    return [f"-l:{path}"]


def export_library(mod: Module, path: str,
                   fcompile: Callable[..., Any] | None = None,
                   options: Sequence[str] | None = None) -> None:
    """Link ``mod`` into the shared library ``path``.

    Parameters
    ----------
    fcompile : callable, optional
        ``fcompile(output, objects, options)`` (e.g. ``contrib.cc.create_shared``); default:
        the C compiler with ``-shared -fPIC``.
    options : list of str, optional
        Extra link flags.
    """
    extra = list(options or [])
    if mod._runtime is ParallelRuntime.GOMP:
        extra += _gomp_flags()
    with tempfile.TemporaryDirectory(prefix="templtune_export_") as tmp:
        objs = _objects(mod, tmp)
        if fcompile is not None:
            fcompile(os.fspath(path), objs, extra)
        else:
            # libm: kernels may call expf, erf ... (resolved by the loading process otherwise)
            _run([_cc(), "-shared", "-fPIC", "-o", os.fspath(path), *objs, *extra, "-lm"],
                 "linking the shared library")


def load_shared(path: str) -> Module:
    """The :class:`Module` stored in a shared library written by :func:`export_library` (or
    linked from a :func:`save`-d object).

    Raises
    ------
    CodegenError
        If the library cannot be opened or has no module description.
    """
    from templtune.codegen.llvm.compile import load_libgomp
    from templtune.runtime.module import load_module

    try:
        try:
            lib = ctypes.CDLL(os.path.abspath(path))
        except OSError as e:
            # a libgomp kernel's library linked from a saved .o alone leaves GOMP_* undefined
            if "GOMP_" not in str(e) or not load_libgomp():
                raise
            lib = ctypes.CDLL(os.path.abspath(path))
    except OSError as e:
        raise CodegenError(f"cannot open shared library {path}: {e}") from None
    try:
        size = ctypes.c_uint64.in_dll(lib, SIZE_SYMBOL).value
        addr = ctypes.addressof(ctypes.c_char.in_dll(lib, BLOB_SYMBOL))
    except ValueError:
        raise CodegenError(f"{path} is a shared library but not a templtune module (no "
                           f"{BLOB_SYMBOL})") from None
    return load_module(ctypes.string_at(addr, size))
