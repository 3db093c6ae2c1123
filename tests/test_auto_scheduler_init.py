"""auto_scheduler CPU initial population: fused vectorization of tiled stages, register-sized
innermost tiles; every sampled and mutated state still matches numpy."""

from __future__ import annotations

import numpy as np

import templtune
from templtune import te, topi
from templtune.auto_scheduler import ComputeDAG, SearchTask, SketchPolicy
from templtune.auto_scheduler.mutation import mutate_tile_size
from templtune.auto_scheduler.search_policy import CPU_PARAMS, DEFAULT_PARAMS, state_key
from templtune.auto_scheduler.search_task import HardwareParams
from templtune.auto_scheduler.sketch import is_tiled
from templtune.auto_scheduler.transform_step import AnnotationStep, FuseStep, SplitStep

HW = HardwareParams(2, 64, 64, 0, 0, 0, 0, 0)


def conv_relu() -> list:
    data = te.placeholder((1, 4, 6, 6), name="data")
    kernel = te.placeholder((16, 4, 3, 3), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, 1, 1, 1)
    return [data, kernel, topi.nn.relu(conv)]


def _policy(tensors: list, target: str = "llvm", seed: int = 0) -> SketchPolicy:
    task = SearchTask(compute_dag=ComputeDAG(tensors), target=target, hardware_params=HW)
    return SketchPolicy(task, seed=seed, verbose=0)


def _vectorized_fused_tiled(state) -> bool:
    """True when a tiled stage vectorizes an iterator made by fusing its innermost ones."""
    steps = state.transform_steps
    for n, s in enumerate(steps):
        if isinstance(s, AnnotationStep) and s.annotation == 2 and n and \
                isinstance(steps[n - 1], FuseStep) and steps[n - 1].stage_id == s.stage_id:
            pre = state.stages[s.stage_id]
            if is_tiled(state, s.stage_id) and pre.iters[s.iter_id].annotation == 2:
                return True
    return False


def _check(tensors: list, states: list) -> None:
    from templtune.te.evaluate import evaluate

    dag = ComputeDAG(tensors)
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, [int(x.value) for x in t.shape]).astype("float32")
           for t in tensors[:-1]]
    res = evaluate([tensors[-1]], dict(zip(tensors[:-1], ins)))
    ref = np.asarray(res[tensors[-1]] if isinstance(res, dict) else res[0])
    for s in states:
        sch, args = dag.apply_steps_from_state(s)
        mod = templtune.build(sch, args, target="llvm")
        out = np.zeros(ref.shape, "float32")
        mod(*[a.copy() for a in ins], out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
                                   err_msg=dag.print_python_code_from_state(s))


def test_cpu_innermost_tiles_register_sized_gpu_keeps_tvm_default() -> None:
    a = te.placeholder((64, 64), name="a")
    b = te.placeholder((64, 64), name="b")
    r = te.reduce_axis((0, 64), name="r")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
    cpu = _policy([a, b, c])
    assert cpu.params["max_innermost_split_factor"] == CPU_PARAMS[
        "max_innermost_split_factor"] == 16
    pop = cpu.sample_initial_population(20)
    lens = [s.lengths[-1] for p in pop for s in p.transform_steps if isinstance(s, SplitStep)]
    assert lens and max(lens) <= 16
    rng = np.random.default_rng(0)
    for p in pop:
        m = mutate_tile_size(cpu, p, rng)
        if m is not None:
            assert all(s.lengths[-1] <= 16 for s in m.transform_steps
                       if isinstance(s, SplitStep))
    gpu = SketchPolicy(SearchTask(compute_dag=ComputeDAG([a, b, c]), target="cuda"), seed=0,
                       verbose=0)
    assert gpu.params["max_innermost_split_factor"] == DEFAULT_PARAMS[
        "max_innermost_split_factor"] == 64
    user = SketchPolicy(cpu.task, seed=0, verbose=0,
                        params={"max_innermost_split_factor": 64})
    assert user.params["max_innermost_split_factor"] == 64


def test_tiled_stage_fuses_innermost_before_vectorizing_and_matches_numpy() -> None:
    tensors = conv_relu()
    pol = _policy(tensors, seed=1)
    pop = pol.sample_initial_population(40)
    fused = [s for s in pop if _vectorized_fused_tiled(s)]
    assert fused, "no tiled stage vectorized a fused iterator in 40 samples"
    rng = np.random.default_rng(3)
    muts = [m for m in (mutate_tile_size(pol, s, rng) for s in fused) if m is not None]
    _check(tensors, fused[:4] + muts[:3])


def _matmul(n: int = 64) -> list:
    a = te.placeholder((n, n), name="a")
    b = te.placeholder((n, n), name="b")
    r = te.reduce_axis((0, n), name="r")
    return [a, b, te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")]


def _blocks(state) -> list[tuple[int, ...]]:
    """Innermost spatial tile (iterators after the last reduction one) of each tiled stage."""
    out = []
    for st in state.stages:
        kinds = [it.iter_kind for it in st.iters]
        if 1 in kinds and any(".0" in it.name for it in st.iters):
            last_r = max(i for i, k in enumerate(kinds) if k == 1)
            out.append(tuple(it.range for it in st.iters[last_r + 1:] if it.iter_kind == 0))
    return out


def _middle(state) -> list[int]:
    """Ranges of the spatial iterators of the SSRSRS middle level (``<axis>.2``) of tiled
    stages that have a reduction."""
    return [it.range for st in state.stages if any(it.iter_kind == 1 for it in st.iters)
            for it in st.iters if it.iter_kind == 0 and it.name.endswith(".2")
            and any(".0" in x.name for x in st.iters)]


def test_cpu_vector_follows_the_target() -> None:
    from templtune.auto_scheduler.tile_prior import cpu_vector

    tensors = _matmul()
    lanes = {t: cpu_vector(SearchTask(compute_dag=ComputeDAG(tensors), target=t,
                                      hardware_params=HW))
             for t in ("llvm -mcpu=znver4", "llvm -mcpu=znver3",
                       "llvm -mcpu=znver4 -mattr=-avx512f", "llvm -mcpu=haswell")}
    assert lanes == {"llvm -mcpu=znver4": (16, 28), "llvm -mcpu=znver3": (8, 14),
                     "llvm -mcpu=znver4 -mattr=-avx512f": (8, 14),
                     "llvm -mcpu=haswell": (8, 14)}


def _filled(pol: SketchPolicy, n: int, seed: int = 0) -> list:
    """``n`` sketches with their tile sizes filled (before the annotations fuse iterators)."""
    from templtune.auto_scheduler.init_rules import fill_tile_size

    rng = np.random.default_rng(seed)
    sk = pol.generate_sketches()
    return [fill_tile_size(pol, sk[k % len(sk)], rng) for k in range(n)]


def test_register_tile_prior_shapes_the_innermost_block() -> None:
    from templtune.auto_scheduler.tile_prior import register_block_ok

    tensors = _matmul()
    task = SearchTask(compute_dag=ComputeDAG(tensors), target="llvm -mcpu=znver3",
                      hardware_params=HW)
    on = SketchPolicy(task, seed=0, verbose=0, params={"cpu_register_tile_prior": 1.0,
                                                       "cpu_middle_level_one": 1.0})
    off = SketchPolicy(task, seed=0, verbose=0, params={"cpu_register_tile_prior": 0.0})
    assert CPU_PARAMS["cpu_register_tile_prior"] > 0
    filled_on, filled_off = _filled(on, 30), _filled(off, 30)
    assert all(register_block_ok(on, s) for s in filled_on)
    assert sum(register_block_ok(off, s) for s in filled_off) < 15
    # AVX2: the innermost iterator fills whole 8-lane vectors, 7..14 of them per block (a
    # power-of-two matmul makes 8..14), and the block is reused over at least 8 steps of the
    # innermost reduction level
    for s in filled_on:
        for block in _blocks(s):
            assert block[-1] % 8 == 0
            assert 8 <= int(np.prod(block[:-1])) * block[-1] // 8 <= 14
        inner_r = [it.range for st in s.stages for it in st.iters
                   if it.iter_kind == 1 and it.name.endswith(".1")]
        assert inner_r and int(np.prod(inner_r)) >= 8
        # SSRSRS: the spatial level between the two reduction levels (".2") is 1, so the
        # block accumulates over the whole reduction below the outer tiles
        assert _middle(s) and all(r == 1 for r in _middle(s))
    assert any(r != 1 for s in filled_off for r in _middle(s))
    pop = on.sample_initial_population(12)
    unroll = {st.pragma_type for p in pop for st in p.transform_steps
              if type(st).__name__ == "PragmaStep"}
    assert unroll and unroll <= {"auto_unroll_max_step$64", "auto_unroll_max_step$512"}
    _check(tensors, pop[:4])


def test_middle_level_one_is_drawn_in_its_share_of_the_prior_samples() -> None:
    from templtune.auto_scheduler.tile_prior import MIDDLE_LEVEL_ONE_SHARE, register_block_ok

    task = SearchTask(compute_dag=ComputeDAG(_matmul()), target="llvm -mcpu=znver3",
                      hardware_params=HW)
    assert 0 < CPU_PARAMS["cpu_middle_level_one"] == MIDDLE_LEVEL_ONE_SHARE < 1

    def ones(share: float | None) -> list[bool]:
        params = {"cpu_register_tile_prior": 1.0}
        if share is not None:
            params["cpu_middle_level_one"] = share
        pol = SketchPolicy(task, seed=0, verbose=0, params=params)
        filled = _filled(pol, 40)
        # the middle level's share never loosens the register block
        assert all(register_block_ok(pol, s) for s in filled)
        return [all(r == 1 for r in _middle(s)) for s in filled]

    # seeded: 9 of 40 uniform middle levels happen to be all ones, 18 with the default half
    flat, half = sum(ones(0.0)), sum(ones(None))
    assert all(ones(1.0))
    assert flat + 6 <= half <= 34


def test_register_block_ok_accepts_a_whole_short_axis() -> None:
    from templtune.auto_scheduler.tile_prior import register_block_ok

    tensors = conv_relu()  # output width 6 < 8 lanes: a 6-wide tile is a whole (short) axis
    task = SearchTask(compute_dag=ComputeDAG(tensors), target="llvm -mcpu=znver3",
                      hardware_params=HW)
    pol = SketchPolicy(task, seed=2, verbose=0, params={"cpu_register_tile_prior": 1.0})
    filled = _filled(pol, 20)
    assert all(register_block_ok(pol, s) for s in filled)
    assert any(b and b[-1] == 6 for s in filled for b in _blocks(s))


def test_register_tiles_admit_seven_rows_of_one_vector() -> None:
    from templtune.auto_scheduler.tile_prior import MIN_BLOCK_VECTORS, register_block_ok

    # NHWC 7x7 map: 7 output columns x 8 channels is a 7-vector block (the best NHWC states')
    data = te.placeholder((1, 9, 9, 16), name="data")
    kernel = te.placeholder((3, 3, 16, 16), name="kernel")
    rc, ry, rx = (te.reduce_axis((0, n), name=x) for n, x in ((16, "rc"), (3, "ry"), (3, "rx")))
    conv = te.compute((1, 7, 7, 16), lambda n, y, x, f: te.sum(
        data[n, y + ry, x + rx, rc] * kernel[ry, rx, rc, f], axis=[rc, ry, rx]), name="conv")
    task = SearchTask(compute_dag=ComputeDAG([data, kernel, conv]), target="llvm -mcpu=znver3",
                      hardware_params=HW)
    pol = SketchPolicy(task, seed=0, verbose=0, params={"cpu_register_tile_prior": 1.0})
    filled = _filled(pol, 40)
    assert all(register_block_ok(pol, s) for s in filled)
    vectors = [int(np.prod(b[:-1])) * -(-b[-1] // 8) for s in filled for b in _blocks(s)]
    assert min(vectors) == MIN_BLOCK_VECTORS == 7 and max(vectors) <= 14


def test_learned_model_warm_up_rounds_measure_initial_samples() -> None:
    from templtune.auto_scheduler import XGBModel
    from templtune.auto_scheduler.cost_model import RandomModel

    model = XGBModel(num_warmup_sample=8)
    assert model.warming_up and not RandomModel().warming_up
    pol = SketchPolicy(SearchTask(compute_dag=ComputeDAG(_matmul()), target="llvm",
                                  hardware_params=HW), model, seed=0, verbose=0)
    init = pol.sample_initial_population(20)
    keys = {state_key(s) for s in init}
    out = pol.evolutionary_search(init, 10)
    assert out and all(state_key(s) in keys for s in out)


def test_parallel_degree_follows_compute_at() -> None:
    from templtune.auto_scheduler.parallel_degree import parallel_degree, uses_all_cores

    a, b, c = _matmul()
    d = te.compute(c.shape, lambda i, j: te.max(c[i, j], 0.0), name="d")
    s = ComputeDAG([a, b, d]).init_state  # a, b, c, d
    one = s.split(2, 0, [64]).parallel(2, 0)  # c's parallel loop has 1 iteration
    assert parallel_degree(one, 2) == 1
    assert not uses_all_cores(one, 2) and uses_all_cores(one, 1)
    assert parallel_degree(s.parallel(2, 0), 2) == 64 and uses_all_cores(s.parallel(2, 0), 2)
    assert parallel_degree(s, 2) == 1  # no parallel loop at all
    tiled = s.split(3, 0, [8])  # d: i.0 (8), i.1 (8), j
    # c computed inside d's 8-iteration parallel loop
    inside = tiled.parallel(3, 0).compute_at(2, 3, 1)
    assert parallel_degree(inside, 2) == 8 and uses_all_cores(inside, 2)
    # d's parallel loop (i.1) is inside c's attach point (i.0): c runs on one thread
    outside = tiled.parallel(3, 1).compute_at(2, 3, 0)
    assert parallel_degree(outside, 2) == 1 and not uses_all_cores(outside, 2)


def test_cpu_search_drops_states_that_cannot_use_every_core() -> None:
    from templtune.auto_scheduler.parallel_degree import uses_all_cores

    task = SearchTask(compute_dag=ComputeDAG(conv_relu()), target="llvm -mcpu=znver3",
                      hardware_params=HW)
    assert CPU_PARAMS["cpu_parallel_all_cores"]

    def single_core(on: int) -> int:
        pol = SketchPolicy(task, seed=0, verbose=0, params={"cpu_parallel_all_cores": on})
        pop = pol.sample_initial_population(64)
        kids = [pol._mutate(p) for p in pop for _ in range(4)]
        return sum(not uses_all_cores(s, HW.num_cores) for s in pop + kids if s is not None)

    # seeded: 2 of 64 samples (and more mutants) keep the whole output under one iteration
    assert single_core(0) >= 2
    assert single_core(1) == 0
