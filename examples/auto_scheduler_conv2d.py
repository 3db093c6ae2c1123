"""Auto-schedule a convolution layer (template-free), end to end.

The flow of TVM's "Auto-scheduling a Convolution Layer" tutorial with ``tvm`` replaced by
``templtune``:

1. register the computation (conv2d + bias + relu) as a workload;
2. create a search task and look at its compute DAG;
3. search (sketches, random annotation, evolution guided by an XGBoost cost model), logging
   every measurement;
4. apply the best schedule from the log, look at the lowered IR, build, check against numpy,
   time it; print the equivalent Python schedule;
5. resume the search from the log (preloaded states are not measured again);
6. the CUDA half: search the same layer for ``cuda`` without measuring (no GPU needed), print the
   CUDA source of the best predicted schedule and compile it with nvcc when it is installed.

Run: ``python examples/auto_scheduler_conv2d.py [--trials 20] [--resume-trials 5] [--small]``.
``--small`` uses a 32-channel layer so a short run finishes quickly on a laptop.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

import templtune
from templtune import auto_scheduler, te, topi
from templtune.topi.testing import conv2d_nchw_python


@auto_scheduler.register_workload
def conv2d_layer(N, H, W, CO, CI, KH, KW, stride, padding):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    out = topi.nn.relu(conv + bias)
    return [data, kernel, bias, out]


def resume_search(task: auto_scheduler.SearchTask, log_file: str, trials: int) -> None:
    print("Resume search:")
    cost_model = auto_scheduler.XGBModel()
    cost_model.update_from_file(log_file)
    search_policy = auto_scheduler.SketchPolicy(
        task, cost_model, init_search_callbacks=[auto_scheduler.PreloadMeasuredStates(log_file)])
    measure_ctx = auto_scheduler.LocalRPCMeasureContext(min_repeat_ms=300)
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=trials, runner=measure_ctx.runner,
        measure_callbacks=[auto_scheduler.RecordToFile(log_file)])
    task.tune(tune_option, search_policy=search_policy)
    del measure_ctx


def cuda_half(args: tuple) -> None:
    from templtune.codegen.cuda.compile import compile_cuda, find_nvcc

    task = auto_scheduler.SearchTask(func=conv2d_layer, args=args, target="cuda")
    policy = auto_scheduler.SketchPolicy(task, seed=0, verbose=0, params={
        "evolutionary_search_population": 32})
    # NOTE: zero trials: one search round, no measurement (this machine may have no GPU).
    state = task.tune(auto_scheduler.TuningOptions(num_measure_trials=0, verbose=0),
                      search_policy=policy)
    print("Equivalent python schedule (CUDA, best predicted):")
    print(task.compute_dag.print_python_code_from_state(state))
    sch, tensors = task.compute_dag.apply_steps_from_state(state, is_gpu=True)
    src = templtune.build(sch, tensors, target="cuda").get_source()
    print("CUDA source code:")
    print(src[:2000] + ("..." if len(src) > 2000 else ""))
    if find_nvcc() is not None:
        compile_cuda(src)
        print("nvcc: compiled")
    else:
        print("nvcc not found: CUDA source not compiled")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--resume-trials", type=int, default=5)
    p.add_argument("--small", action="store_true", help="a 32-channel layer")
    p.add_argument("--no-cuda", action="store_true")
    p.add_argument("--log", default=None)
    a = p.parse_args(argv)

    target = templtune.target.Target("llvm")
    # the last layer of ResNet-50 (or a small version of it)
    N, H, W, CO, CI, KH, KW, strides, padding = 1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)
    if a.small:
        CO = CI = 32
    task = auto_scheduler.SearchTask(
        func=conv2d_layer, args=(N, H, W, CO, CI, KH, KW, strides, padding), target=target)
    print("Computational DAG:")
    print(task.compute_dag)

    log_file = a.log or os.path.join(tempfile.mkdtemp(prefix="templtune_"), "conv2d.json")
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=a.trials, num_measures_per_round=min(64, a.trials),
        measure_callbacks=[auto_scheduler.RecordToFile(log_file)], verbose=2)
    task.tune(tune_option)

    sch, args = task.apply_best(log_file)
    print("Lowered TIR:")
    print(templtune.lower(sch, args, simple_mode=True))
    func = templtune.build(sch, args, target)

    data_np = np.random.uniform(size=(N, CI, H, W)).astype(np.float32)
    weight_np = np.random.uniform(size=(CO, CI, KH, KW)).astype(np.float32)
    bias_np = np.random.uniform(size=(1, CO, 1, 1)).astype(np.float32)
    conv_np = conv2d_nchw_python(data_np, weight_np, strides, padding)
    out_np = np.maximum(conv_np + bias_np, 0.0)
    dev = templtune.cpu()
    data_t = templtune.nd.array(data_np, dev)
    weight_t = templtune.nd.array(weight_np, dev)
    bias_t = templtune.nd.array(bias_np, dev)
    out_t = templtune.nd.empty(out_np.shape, "float32", dev)
    func(data_t, weight_t, bias_t, out_t)
    np.testing.assert_allclose(out_np, out_t.numpy(), rtol=1e-3)
    evaluator = func.time_evaluator(func.entry_name, dev, min_repeat_ms=500)
    print("Execution time of this operator: %.3f ms"
          % (np.median(evaluator(data_t, weight_t, bias_t, out_t).results) * 1000))

    print("Equivalent python schedule:")
    print(task.print_best(log_file, print_mode="schedule"))

    if a.resume_trials > 0:
        resume_search(task, log_file, a.resume_trials)
    if not a.no_cuda:
        cuda_half((N, H, W, CO, CI, KH, KW, strides, padding))
    return 0


if __name__ == "__main__":
    sys.exit(main())
