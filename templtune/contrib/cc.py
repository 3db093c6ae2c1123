"""TVM's ``tvm.contrib.cc``: link object files into a shared library with the system compiler."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from templtune.errors import CodegenError

__all__ = ["create_shared", "get_cc"]


def get_cc() -> str | None:
    """The C compiler used: ``$CXX``, else ``g++``, ``gcc`` or ``cc`` on the ``PATH``."""
    from templtune import config

    env = config.get("CXX")
    if env:
        return str(env)
    for name in ("g++", "gcc", "cc"):
        if shutil.which(name):
            return name
    return None


def create_shared(output: str, objects: str | Sequence[str], options: Sequence[str] | None = None,
                  cc: str | None = None) -> None:
    """Link ``objects`` (object files or sources) into the shared library ``output``.

    Parameters
    ----------
    output
        Path of the ``.so`` to write.
    objects
        One path or several.
    options
        Extra compiler flags, appended after the inputs.
    cc
        The compiler to run (default :func:`get_cc`).

    Raises
    ------
    CodegenError
        If no compiler is found or it fails (its output is in the message).
    """
    compiler = cc or get_cc()
    if compiler is None:
        raise CodegenError("no C compiler found (tried $CXX, g++, gcc, cc)")
    inputs = [objects] if isinstance(objects, str) else list(objects)
    cmd = [compiler, "-shared", "-fPIC", "-o", output, *inputs, *(options or [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CodegenError(f"linking {output} failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
