"""AutoTVM names and behaviours TVM users reach for: ``autotvm.tuner.callback`` and
``autotvm.tophub`` as modules, TVM's LocalBuilder/LocalRunner keywords, the annotate space of
``vec`` policies on several axes, and the ``range_length=`` field of the space repr."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from templtune import autotvm
from templtune.autotvm.space import ConfigSpace, EmptyKnobError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_module_names_in_a_fresh_interpreter() -> None:
    code = textwrap.dedent("""
        from templtune.autotvm.tuner import callback
        import templtune.autotvm.tophub
        from templtune import autotvm
        assert callback.log_to_file is autotvm.callback.log_to_file
        assert autotvm.tuner.callback.progress_bar is autotvm.callback.progress_bar
        assert autotvm.tophub is templtune.autotvm.tophub
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_tophub_context_and_reference_log() -> None:
    ctx = autotvm.tophub.context("llvm")
    assert isinstance(ctx, autotvm.ApplyHistoryBest)
    recs = autotvm.tophub.load_reference_log("llvm", "unknown", "conv2d_nchw")
    assert recs and all(inp.task.name == "conv2d_nchw" for inp, _ in recs)
    # a model without records falls back to the model with the most records (TVM)
    assert len(autotvm.tophub.load_reference_log("llvm", "no-such-model", "conv2d_nchw")) == \
        len(recs)
    # every workload of the reference log has a best record in the context
    with ctx:
        for inp, _ in recs:
            assert ctx.query(inp.target, inp.task.workload) is not None


def test_measure_keywords_as_tvm() -> None:
    b = autotvm.LocalBuilder(timeout=5, build_func="default", do_fork=True)
    assert b.timeout == 5
    r = autotvm.LocalRunner(number=2, module_loader=None)
    assert r.number == 2
    with pytest.raises(ValueError, match="build_func='ndk'"):
        autotvm.LocalBuilder(build_func="ndk")
    with pytest.raises(ValueError, match="module_loader"):
        autotvm.LocalRunner(module_loader=lambda *a: None)


def test_annotate_vec_policies_on_several_axes() -> None:
    cfg = ConfigSpace()
    axes = [cfg.axis(4), cfg.axis(8)]
    # TVM's DFS keeps the combinations with at most one vectorized axis
    cfg.define_annotate("tv", axes, policy="try_vec")
    assert [list(e.anns) for e in cfg.space_map["tv"].entities] == \
        [["none", "none"], ["none", "vec"], ["vec", "none"]]
    cfg.define_annotate("tuv", axes, policy="try_unroll_vec")
    assert len(cfg.space_map["tuv"]) == 8
    assert ["vec", "vec"] not in [list(e.anns) for e in cfg.space_map["tuv"].entities]
    cfg.define_annotate("v1", [cfg.axis(4)], policy="vec")
    assert [list(e.anns) for e in cfg.space_map["v1"].entities] == [["vec"]]
    # "vec" on two axes has no entity: TVM raises IndexError, so does templtune (clearly)
    with pytest.raises(IndexError, match="at most one axis may be vectorized"):
        cfg.define_annotate("v2", axes, policy="vec")
    with pytest.raises(EmptyKnobError):
        cfg.define_annotate("v3", axes + [cfg.axis(2)], policy="vec")


def test_space_repr_prints_range_length() -> None:
    cfg = ConfigSpace()
    cfg.define_split("tile_x", cfg.axis(16), num_outputs=2)
    cfg.define_knob("unroll", [0, 1])
    assert repr(cfg).splitlines() == [
        "ConfigSpace (len=10, range_length=10, space_map=",
        "   0 tile_x: Split(policy=factors, product=16, num_outputs=2) len=5",
        "   1 unroll: OtherOption([0, 1]) len=2",
        ")",
    ]
