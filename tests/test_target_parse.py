"""Target strings, defaults, printing and the context-manager scope."""

from __future__ import annotations

import contextvars
import pickle

import pytest

from templtune import target
from templtune.build_module import build
from templtune.errors import TargetError
from templtune.target import Target


def test_llvm_options():
    t = target.Target("llvm -mcpu=znver4 -num-cores=2")
    assert t.kind == "llvm" and t.keys == ("cpu",)
    assert t.attrs == {"mcpu": "znver4", "num-cores": 2}
    assert t.mcpu == "znver4" and t.num_cores == 2
    assert str(t) == "llvm -mcpu=znver4 -num-cores=2"
    t2 = Target("llvm -mtriple=x86_64-linux-gnu -mattr=+avx2")
    assert t2.mtriple == "x86_64-linux-gnu" and t2.mattr == "+avx2"


def test_cuda_defaults_and_overrides():
    t = Target("cuda")
    assert t.keys == ("cuda", "gpu")
    assert (t.max_threads_per_block, t.max_shared_memory_per_block, t.max_registers_per_block,
            t.thread_warp_size) == (1024, 49152, 65536, 32)
    assert str(t) == "cuda"
    t = Target("cuda -arch=sm_90 -max_threads_per_block=512 -max_shared_memory_per_block=98304")
    assert t.arch == "sm_90" and t.max_threads_per_block == 512
    assert t.max_shared_memory_per_block == 98304
    assert Target(str(t)) == t
    assert t.host is not None and t.host.kind == "llvm"


@pytest.mark.parametrize("bad,match", [
    ("opencl", "unknown target kind 'opencl'"),
    ("llvm -num_threads=3", "unknown option -num_threads"),
    ("llvm -num-cores=two", "expects an integer"),
    ("cuda -arch", "needs a value"),
    ("", "empty"),
    ("llvm mcpu=x", "unexpected word"),
])
def test_errors_name_the_problem(bad, match):
    with pytest.raises(TargetError, match=match):
        Target(bad)


def test_context_nesting_and_current():
    assert Target.current() is None
    with pytest.raises(TargetError):
        Target.current(allow_none=False)
    with Target("llvm") as outer:
        assert Target.current() is outer
        with Target("cuda") as inner:
            assert Target.current() is inner
        assert Target.current() is outer
    assert Target.current() is None


def test_context_is_per_context():
    seen = []
    with Target("cuda"):
        contextvars.Context().run(lambda: seen.append(Target.current()))
    assert seen == [None]


def test_equality_hash_pickle():
    t = Target("llvm -num-cores=2")
    assert t == "llvm -num-cores=2" and t != "llvm" and hash(t) == hash(Target(t))
    assert pickle.loads(pickle.dumps(t)) == t


def test_build_unknown_or_scoped_target():
    from templtune.codegen.llvm.testing import elementwise

    f = elementwise(lambda a: a + 1.0, ["float32"], "float32", 16)
    with Target("llvm -num-cores=1"):
        assert build(f).num_threads == 1
    with pytest.raises(TargetError):
        build(f, target="vulkan")


def test_build_cuda_target_delegates_to_cuda_backend(monkeypatch):
    from templtune.codegen import registry as cg_registry
    from templtune.codegen.llvm.testing import elementwise
    from templtune.runtime import registry as rt_registry

    seen = []

    class FakeCuda(cg_registry.Codegen):
        def render(self, func, target, name=None):
            seen.append((func, target))
            return "source"

        def compile(self, rendered, target, timings=None):
            return rendered + "+binary"

    monkeypatch.setitem(cg_registry.CODEGENS, "cuda", FakeCuda())
    monkeypatch.setitem(rt_registry.LOADERS, "cuda", lambda art: ("cuda-module", art))
    f = elementwise(lambda a: a + 1.0, ["float32"], "float32", 16)
    with Target("cuda -arch=sm_90"):
        assert build(f) == ("cuda-module", "source+binary")
    assert seen[0][0] is f and seen[0][1].kind == "cuda" and seen[0][1].arch == "sm_90"
