"""Item 14 of issue 16: a scratch buffer that cannot be allocated raises, it does not segfault.

Each case runs in a fresh interpreter, so a regression (a NULL store) kills only that child."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# B needs 2**60 float32 elements (2**58 per row): more than any x86-64 address space, so
# aligned_alloc returns NULL whatever the overcommit policy.
_PRELUDE = """
import numpy as np
import templtune
from templtune import te
from templtune.errors import RuntimeCallError
A = te.placeholder((4,), name="A")
m = 1 << 29
B = te.compute((4, m, m), lambda i, j, k: A[i] + 1.0, name="B")
j, k = te.reduce_axis((0, m), name="j"), te.reduce_axis((0, m), name="k")
C = te.compute((4,), lambda i: te.sum(B[i, j, k], axis=[j, k]), name="C")
s = te.create_schedule(C.op)
"""

_CALLS = """
f = templtune.build(s, [A, C], "llvm")
assert "aligned_alloc" in f.get_source("ll")
a, c = np.arange(4, dtype="float32"), np.zeros(4, "float32")
for call in (lambda: f(a, c), lambda: f.time_evaluator(f.entry_name, None, number=2)(a, c)):
    try:
        call()
    except RuntimeCallError as e:
        assert "could not be allocated" in str(e), e
        print("raised")
    else:
        print("no error")
# the module stays usable after the failure: a small schedule in the same process works
X = te.compute((4,), lambda i: A[i] * 3.0, name="X")
g = templtune.build(te.create_schedule(X.op), [A, X], "llvm")
x = np.zeros(4, "float32")
g(a, x)
np.testing.assert_allclose(x, a * 3)
print("alive")
"""


def _run(schedule: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(schedule) + textwrap.dedent(_CALLS)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("schedule", [
    pytest.param("", id="root-scope"),
    # the scratch buffer is allocated inside a parallel loop: each thread's failure must reach
    # the kernel's status
    pytest.param("s[C].parallel(C.op.axis[0])\ns[B].compute_at(s[C], C.op.axis[0])\n",
                 id="inside-parallel-loop"),
])
def test_huge_scratch_buffer_raises_instead_of_crashing(schedule: str) -> None:
    r = _run(schedule)
    assert r.returncode == 0, f"child died with {r.returncode}:\n{r.stderr[-3000:]}"
    assert r.stdout.split() == ["raised", "raised", "alive"], r.stdout
