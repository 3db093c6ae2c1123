"""libgomp fork safety for modules whose parallel loops run on libgomp (see :class:`_ForkGuard`;
templtune's own pool resets itself in a forked child)."""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("templtune.runtime")


class _ForkGuard:
    """NOTE: libgomp is not fork-safe: a child forked after its parent ran a parallel region
    hangs in its first own parallel region. So the process remembers whether it has launched
    one, and a forked child of such a process runs parallel loops on one thread (warned once).
    Workers started with ``spawn``/``forkserver`` or as fresh subprocesses are unaffected."""

    gomp_used = False
    degraded = False
    warned = False

    @classmethod
    def after_fork_in_child(cls) -> None:
        cls.degraded = cls.gomp_used


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ForkGuard.after_fork_in_child)


def fork_check(nthreads: ctypes.c_int32) -> None:
    """Before a parallel module runs: in a forked child of a process that ran parallel code,
    set its thread count ``nthreads`` to 1 (warned once); else note that libgomp is in use."""
    if _ForkGuard.degraded:
        if nthreads.value != 1:
            nthreads.value = 1
            if not _ForkGuard.warned:
                _ForkGuard.warned = True
                log.warning("this process was forked after running parallel code; libgomp "
                            "cannot be used here, parallel loops run on one thread (start "
                            "workers with 'spawn' or 'forkserver' instead)")
    else:
        _ForkGuard.gomp_used = True
