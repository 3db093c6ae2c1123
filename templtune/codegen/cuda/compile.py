"""Compile CUDA C with ``nvcc`` (source -> cubin or PTX bytes), with an on-disk cache.

The cache key is a hash of the source, the architecture, the output format, the options and the
nvcc version, so a changed toolkit never serves stale binaries. Entries are written atomically
(rename), so concurrent builder processes can share the cache directory.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from templtune import config
from templtune.errors import CodegenError

log = logging.getLogger("templtune.codegen.cuda")

NVCC_TIMEOUT_S = 120.0


def find_nvcc() -> str | None:
    """Path of ``nvcc`` (PATH, then ``$CUDA_HOME``/``$CUDA_PATH``/``/usr/local/cuda``), or None."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (config.get("CUDA_HOME"), config.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return os.path.join(root, "bin", "nvcc")
    return None


@functools.lru_cache(maxsize=4)
def _nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CodegenError(f"cannot run {nvcc}: {exc}") from exc
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "unknown"


def cache_dir() -> Path:
    """``$TEMPLTUNE_CUDA_CACHE``, else ``~/.cache/templtune/cuda``."""
    env = config.get("TEMPLTUNE_CUDA_CACHE")
    return Path(env) if env is not None else Path.home() / ".cache" / "templtune" / "cuda"


def _run_nvcc(cmd: list[str]) -> tuple[int, str, str]:
    """Run nvcc in its own process group, so that a timeout kills cicc and ptxas with it (they
    would otherwise outlive nvcc); returns (exit code, stdout, stderr)."""
    import signal

    # NOTE: a new group, not a new session: a measurement worker kills its whole session
    # when it is killed, nvcc's group included.
    group: dict = ({"process_group": 0} if sys.version_info >= (3, 11)
                   else {"preexec_fn": os.setpgrp})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, **group)
    try:
        stdout, stderr = proc.communicate(timeout=NVCC_TIMEOUT_S)
    except BaseException as exc:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise CodegenError(f"nvcc timed out after {NVCC_TIMEOUT_S:.0f} s") from exc
        raise
    return proc.returncode, stdout, stderr


def compile_cuda(source: str, arch: str = "sm_90", fmt: str = "cubin",
                 options: tuple[str, ...] = (), use_cache: bool = True) -> bytes:
    """Compile ``source`` with nvcc and return the cubin (``fmt="cubin"``) or PTX bytes.

    Raises
    ------
    CodegenError
        nvcc is missing, fails (the message carries nvcc's diagnostics) or times out.
    """
    if fmt not in ("cubin", "ptx", "fatbin"):
        raise CodegenError(f"unknown CUDA output format {fmt!r}; expected cubin, ptx or fatbin")
    nvcc = find_nvcc()
    if nvcc is None:
        raise CodegenError("nvcc not found on PATH or under $CUDA_HOME; cannot compile CUDA")
    key = hashlib.sha256("\0".join(
        [source, arch, fmt, *options, _nvcc_version(nvcc)]).encode()).hexdigest()
    cached = cache_dir() / f"{key}.{fmt}"
    if use_cache and cached.exists():
        return cached.read_bytes()
    arch_flag = f"-arch={arch}" if fmt != "ptx" else f"-arch=compute_{arch.removeprefix('sm_')}"
    with tempfile.TemporaryDirectory(prefix="templtune_nvcc_") as tmp:
        src = Path(tmp) / "kernel.cu"
        out = Path(tmp) / f"kernel.{fmt}"
        src.write_text(source)
        cmd = [nvcc, f"--{fmt}", arch_flag, "-O3", *options, "-o", str(out), str(src)]
        code, stdout, stderr = _run_nvcc(cmd)
        if code != 0:
            msg = (stderr or stdout).strip()
            raise CodegenError(f"nvcc failed (exit {code}):\n{msg}\nCUDA source:\n"
                               f"{source}")
        data = out.read_bytes()
    if use_cache:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            fd, tmpname = tempfile.mkstemp(dir=cached.parent, suffix=".part")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmpname, cached)
        except OSError as exc:  # a read-only home must not fail the build
            log.debug("cannot write the CUDA cache entry %s: %s", cached, exc)
    return data
