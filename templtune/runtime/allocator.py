"""Keep kernels' scratch buffers cheap to allocate.

Generated code allocates large intermediate buffers (packed weights, Winograd tiles) with
``aligned_alloc`` on every call. glibc serves big requests with ``mmap`` and trims freed heap
memory back to the OS, so every call pays fresh page faults: a large share of a Winograd call,
enough to make the tuner rank configurations by allocation cost. TVM avoids this with a
pooled workspace allocator; templtune gets the same effect by raising glibc's mmap and trim
thresholds once per process, so freed scratch memory is reused by the next call.

The setting is process-wide (it also applies to numpy in the same process) and keeps up to
256 MiB of freed memory mapped. ``TEMPLTUNE_KEEP_SCRATCH=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import functools
import logging

from templtune import config

logger = logging.getLogger("templtune.runtime")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# NOTE: 32 MiB is the largest mmap threshold glibc accepts on 64-bit hosts.
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 256 << 20


def raise_malloc_thresholds() -> bool:
    """Raise glibc's mmap and trim thresholds (idempotent); ``True`` when they are in effect,
    ``False`` on a C library without ``mallopt``."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


@functools.cache
def retain_scratch_memory() -> bool:
    """Raise glibc's mmap/trim thresholds once; ``True`` when the setting is in effect."""
    if not config.get("TEMPLTUNE_KEEP_SCRATCH"):
        return False
    ok = raise_malloc_thresholds()
    logger.debug("glibc scratch-memory thresholds raised: %s", ok)
    return ok
