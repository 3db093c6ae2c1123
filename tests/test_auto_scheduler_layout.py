"""auto_scheduler layout rewrite: layout-free placeholders re-laid to follow the tiles (inside
the kernel, INSERT_TRANSFORM_STAGE), still computing what numpy computes."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import auto_scheduler as auto
from templtune import te, topi
from templtune.auto_scheduler import ComputeDAG, SearchTask, SketchPolicy
from templtune.auto_scheduler.layout_rewrite import (
    LAYOUT_FREE_ATTR,
    LayoutDim,
    RewrittenLayout,
    copy_order,
    rewritten_layouts,
)
from templtune.auto_scheduler.mutation import mutate_parallel, mutate_tile_size
from templtune.auto_scheduler.replay import replay_schedule
from templtune.auto_scheduler.search_task import HardwareParams

HW = HardwareParams(2, 64, 64, 0, 0, 0, 0, 0)


@auto.register_workload("test_as_layout_dense", override=True)
def dense(m: int, n: int, k: int) -> list:
    data = te.placeholder((m, k), name="data")
    weight = te.placeholder((n, k), name="weight")
    r = te.reduce_axis((0, k), name="k")
    out = te.compute((m, n), lambda i, j: te.sum(data[i, r] * weight[j, r], axis=r), name="out",
                     attrs={LAYOUT_FREE_ATTR: [weight]})
    return [data, weight, out]


def conv_relu(n: int, ci: int, hw: int, co: int, kk: int) -> list:
    data = te.placeholder((n, ci, hw, hw), name="data")
    kernel = te.placeholder((co, ci, kk, kk), name="kernel")
    pad = topi.nn.pad(data, (0, 0, 1, 1), (0, 0, 1, 1), name="pad")
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kk), name="ry")
    rx = te.reduce_axis((0, kk), name="rx")
    oh = hw + 2 - kk + 1
    conv = te.compute((n, co, oh, oh), lambda b, c, y, x: te.sum(
        pad[b, rc, y + ry, x + rx] * kernel[c, rc, ry, rx], axis=[rc, ry, rx]), name="conv",
        attrs={LAYOUT_FREE_ATTR: [kernel]})
    return [data, kernel, topi.nn.relu(conv)]


def _ref(tensors: list, ins: list[np.ndarray]) -> np.ndarray:
    from templtune.te.evaluate import evaluate

    res = evaluate([tensors[-1]], {t: a for t, a in zip(tensors[:-1], ins)})
    return np.asarray(res[tensors[-1]] if isinstance(res, dict) else res[0])


def _check(tensors: list, states: list) -> int:
    """Build every state with layout rewrite, compare with numpy; return how many re-laid."""
    dag = ComputeDAG(tensors)
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
           for t in tensors[:-1]]
    ref = _ref(tensors, ins)
    n = 0
    for s in states:
        sch, args = dag.apply_steps_from_state(s, layout_rewrite=1)
        assert [a.name for a in args] == [t.name for t in tensors]  # signature unchanged
        n += any(st.op.name.endswith(".layout") for st in sch.stages)
        mod = templtune.build(sch, args, target="llvm")
        out = np.zeros(ref.shape, "float32")
        mod(*[a.copy() for a in ins], out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
                                   err_msg=dag.print_python_code_from_state(s))
    return n


def test_layout_transform_matches_index_formula() -> None:
    lay = RewrittenLayout("w", (12, 10), (LayoutDim(0, 6, 2), LayoutDim(1, 5, 2),
                                           LayoutDim(0, 1, 6), LayoutDim(1, 1, 5)))
    w = np.arange(120, dtype="float32").reshape(12, 10)
    t = lay.transform(w)
    assert t.shape == (2, 2, 6, 5) and t.flags["C_CONTIGUOUS"]
    for a in range(2):
        for b in range(2):
            for c in range(6):
                for d in range(5):
                    assert t[a, b, c, d] == w[a * 6 + c, b * 5 + d]
    with pytest.raises(ValueError, match="expected shape"):
        lay.transform(w.T)


def test_copy_order_reads_consecutive_source_elements_innermost() -> None:
    # [1024, 1024] -> [n0 64, k0 64, k1 16, n1 16]: the 16-long stride-1 piece of the source's
    # contiguous dimension (k1) goes innermost; the other loops keep the layout's order
    lay = RewrittenLayout("w", (1024, 1024), (LayoutDim(0, 16, 64), LayoutDim(1, 16, 64),
                                              LayoutDim(1, 1, 16), LayoutDim(0, 1, 16)))
    assert copy_order(lay) == [0, 1, 3, 2]
    assert copy_order(lay, min_run=32) == [0, 1, 2, 3]
    # OIHW conv weight -> [o0, i, kh, kw, o1]: the stride-1 piece (kw, 3 long) is too short
    conv = RewrittenLayout("k", (64, 32, 3, 3), (
        LayoutDim(0, 8, 8), LayoutDim(1, 1, 32), LayoutDim(2, 1, 3), LayoutDim(3, 1, 3),
        LayoutDim(0, 1, 8)))
    assert copy_order(conv) == [0, 1, 2, 3, 4]
    assert copy_order(conv, min_run=3) == [0, 1, 2, 4, 3]


def test_dense_states_relaid_and_match_numpy() -> None:
    tensors = dense(16, 32, 24)
    task = SearchTask(compute_dag=ComputeDAG(tensors), target="llvm", hardware_params=HW)
    pol = SketchPolicy(task, seed=1, verbose=0)
    pop = pol.sample_initial_population(8)
    rng = np.random.default_rng(2)
    muts = [m for m in (mutate_tile_size(pol, s, rng) for s in pop) if m is not None][:3]
    muts += [m for m in (mutate_parallel(pol, s, rng) for s in pop) if m is not None][:2]
    assert _check(tensors, pop + muts) >= len(pop) // 2


def test_layout_follows_tiles_innermost_contiguous() -> None:
    tensors = dense(16, 32, 24)
    dag = ComputeDAG(tensors)
    pol = SketchPolicy(SearchTask(compute_dag=dag, target="llvm", hardware_params=HW), seed=0,
                       verbose=0)
    for s in pol.sample_initial_population(10):
        sch, _ = replay_schedule(dag, s)
        for reader, t, lay in rewritten_layouts(dag, sch):
            assert t.name == "weight" and int(np.prod(lay.shape)) == 32 * 24
            # the layout's last dimension is the reader's innermost weight piece
            leaves = [lv.var.name for lv in reader.leaf_iter_vars]
            assert leaves and lay.dims[-1].stride == 1
            # in loop order: each dim's pieces from the largest stride down
            for d in (0, 1):
                st = [x.stride for x in lay.dims if x.dim == d]
                assert st == sorted(st, reverse=True)


def test_no_attr_no_rewrite_and_option_zero() -> None:
    a = te.placeholder((16, 16), name="a")
    b = te.placeholder((16, 16), name="b")
    r = te.reduce_axis((0, 16), name="r")
    c = te.compute((16, 16), lambda i, j: te.sum(a[i, r] * b[j, r], axis=r), name="c")
    dag = ComputeDAG([a, b, c])
    pol = SketchPolicy(SearchTask(compute_dag=dag, target="llvm", hardware_params=HW), seed=0,
                       verbose=0)
    for s in pol.sample_initial_population(4):
        sch, _ = dag.apply_steps_from_state(s, layout_rewrite=1)
        assert not any(st.op.name.endswith(".layout") for st in sch.stages)
    d = ComputeDAG(dense(16, 32, 24))
    s = SketchPolicy(SearchTask(compute_dag=d, target="llvm", hardware_params=HW), seed=0,
                     verbose=0).sample_initial_population(4)
    for st in s:
        sch, _ = d.apply_steps_from_state(st)  # default: no rewrite
        assert not any(x.op.name.endswith(".layout") for x in sch.stages)


def test_conv_kernel_relaid_and_matches_numpy() -> None:
    tensors = conv_relu(1, 4, 6, 8, 3)
    pol = SketchPolicy(SearchTask(compute_dag=ComputeDAG(tensors), target="llvm",
                                  hardware_params=HW), seed=4, verbose=0)
    pop = pol.sample_initial_population(6)
    assert _check(tensors, pop) >= 1


def test_measured_and_applied_with_layout_rewrite(tmp_path) -> None:
    log = str(tmp_path / "dense.json")
    task = SearchTask(func=dense, args=(16, 32, 24), target="llvm")
    assert task.layout_rewrite_option == 1
    opt = auto.TuningOptions(num_measure_trials=4, num_measures_per_round=2, verbose=0,
                             builder=auto.LocalBuilder(n_parallel=2),
                             runner=auto.LocalRunner(min_repeat_ms=0, number=1),
                             measure_callbacks=[auto.RecordToFile(log)])
    pol = auto.SketchPolicy(task, seed=3, verbose=0,
                            params={"evolutionary_search_population": 16})
    task.tune(opt, search_policy=pol)
    recs = list(auto.RecordReader(log))
    # the runner checks every candidate against the naive schedule: all pass
    assert len(recs) == 4 and all(r.error_no == 0 for _, r in recs)
    sch, args = task.apply_best(log)
    assert any(st.op.name == "weight.layout" for st in sch.stages)
    mod = templtune.build(sch, args, target="llvm")
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (16, 24)).astype("float32")
    w = rng.uniform(-1, 1, (32, 24)).astype("float32")
    o = np.zeros((16, 32), "float32")
    mod(a, w, o)
    np.testing.assert_allclose(o, a @ w.T, rtol=1e-4, atol=1e-4)
    sch0, _ = task.apply_best(log, layout_rewrite_option=0)
    assert not any(st.op.name.endswith(".layout") for st in sch0.stages)


def test_pre_transformed_option_reads_relaid_weights() -> None:
    """REWRITE_FOR_PRE_TRANSFORMED: the kernel takes ``weight.layout`` (new shape) in place of
    ``weight``; feeding RewrittenLayout.transform(weight) gives numpy's answer."""
    from templtune.auto_scheduler.layout_rewrite import rewrite_layout

    tensors = dense(16, 32, 24)
    dag = ComputeDAG(tensors)
    pol = SketchPolicy(SearchTask(compute_dag=dag, target="llvm", hardware_params=HW), seed=3,
                       verbose=0)
    rng = np.random.default_rng(4)
    data = rng.uniform(-1, 1, (16, 24)).astype("float32")
    weight = rng.uniform(-1, 1, (32, 24)).astype("float32")
    ref = data @ weight.T
    relaid = 0
    for s in pol.sample_initial_population(6):
        sch, args = dag.apply_steps_from_state(s, layout_rewrite=2)
        sch0, _ = replay_schedule(dag, s)
        done = rewrite_layout(dag, sch0, pre_transformed=True)
        w_in = weight
        if done:
            relaid += 1
            (orig, new, lay), = done
            assert args[1].name == "weight.layout" and tuple(
                int(x.value) for x in args[1].shape) == lay.shape
            assert not any(st.op.name == "weight.layout" and st.op.input_tensors
                           for st in sch.stages)  # no transform stage in the kernel
            w_in = lay.transform(weight)
        else:
            assert args[1].name == "weight"
        out = np.zeros((16, 32), "float32")
        templtune.build(sch, args, target="llvm")(data, w_in, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert relaid >= 3
