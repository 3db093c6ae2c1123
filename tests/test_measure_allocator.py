"""The local runner times kernels with glibc's scratch allocation pinned (steady state)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

from templtune.measure import worker


def _has_glibc_mallopt() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallopt")
    except OSError:
        return False


def _run(code: str, env_extra: dict[str, str]) -> str:
    import os

    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


# NOTE: a kernel's scratch buffers (here 4, 2 and 6 MiB, freed together after the call) leave
# more free memory at the top of glibc's heap than its default trim threshold, so glibc hands it
# back to the OS and the next call faults every page in again; pinned, the heap is kept.
# Minor page faults (getrusage) tell the two apart.
_PROBE = """
import resource, numpy as np
from templtune.measure import worker
pinned = worker._pin_scratch_allocator()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def call():
    bufs = [np.ones(n, np.float32) for n in (1 << 20, 1 << 19, 3 << 19)]
    del bufs
call()
before = faults()
for _ in range(20):
    call()
print(pinned, faults() - before)
"""


@pytest.mark.skipif(not _has_glibc_mallopt(), reason="needs glibc mallopt")
def test_runner_pins_allocator_so_scratch_is_not_refaulted():
    pinned, faults = _run(_PROBE, {}).split()
    assert pinned == "True"
    # 20 calls x 12 MiB would be ~60 000 faults if the scratch were faulted in every call
    assert int(faults) < 2000


@pytest.mark.skipif(not _has_glibc_mallopt(), reason="needs glibc mallopt")
def test_pinning_can_be_turned_off():
    pinned, faults = _run(_PROBE, {"TEMPLTUNE_RUNNER_PIN_MALLOC": "0"}).split()
    assert pinned == "False"
    assert int(faults) > 10000  # glibc default: every buffer faulted in again


def test_pin_is_idempotent():
    first = worker._pin_scratch_allocator()
    assert worker._pin_scratch_allocator() == first
