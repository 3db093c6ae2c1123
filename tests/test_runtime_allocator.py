"""The process-wide scratch-memory setting made when the first module loads."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = (
    "import templtune\n"
    "from templtune.runtime.allocator import retain_scratch_memory\n"
    "print(retain_scratch_memory())\n"
)


def _run(**env: str) -> str:
    out = subprocess.run([sys.executable, "-c", CODE], env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_thresholds_raised_on_glibc_and_switchable() -> None:
    assert _run() == "True"
    assert _run(TEMPLTUNE_KEEP_SCRATCH="0") == "False"


def test_modules_with_scratch_buffers_still_compute_correctly() -> None:
    import numpy as np

    import templtune
    from templtune import te

    n = 1 << 20  # a 4 MiB intermediate: served by the heap once thresholds are raised
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    f = templtune.build(s, [A, C])
    a = np.random.default_rng(0).random(n, dtype=np.float32)
    for _ in range(3):
        c = np.zeros(n, np.float32)
        f(a, c)
        np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
