"""Auto-scheduling a neural network for x86 CPU, end to end.

The flow of TVM's "Auto-scheduling a Neural Network" tutorials (``tune_network_x86`` /
``tune_network_cuda``) with ``tvm`` replaced by ``templtune``:

1. get a network and its (random) weights from the model zoo;
2. extract the search tasks and their weights, print each task's compute DAG;
3. tune all tasks under one trial budget with the task scheduler (the table of per-task latency,
   GFLOPS and trials is printed as it goes), logging every measurement;
4. compile the network with the best records, check it against numpy, time it.

Run: ``python examples/tune_network_x86.py [--network resnet-18] [--trials 200]
[--image 224] [--layout NHWC]``. The defaults use a 64x64 image so that a short run finishes in
minutes on a laptop; ~800 trials per task approach convergence. Re-running resumes from the log.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import templtune
from templtune import auto_scheduler, graph_executor, relay, transform


def get_network(name: str, batch_size: int, layout: str, image: int) -> tuple:
    """The network, its weights, and its input/output shapes (as in the tutorial)."""
    image_shape = (image, image, 3) if layout == "NHWC" else (3, image, image)
    if name.startswith("resnet-"):
        mod, params = relay.testing.resnet.get_workload(
            num_layers=int(name.split("-")[1]), batch_size=batch_size, layout=layout,
            image_shape=image_shape)
    elif name == "mobilenet":
        mod, params = relay.testing.mobilenet.get_workload(
            batch_size=batch_size, layout=layout, image_shape=image_shape)
    else:
        raise ValueError(f"unsupported network {name!r}")
    return mod, params, (batch_size, *image_shape), (batch_size, 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="resnet-18")
    ap.add_argument("--layout", default="NHWC", choices=("NCHW", "NHWC"))
    ap.add_argument("--image", type=int, default=64)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--log", default=None)
    args = ap.parse_args()

    target = templtune.target.Target("llvm")
    mod, params, input_shape, output_shape = get_network(args.network, 1, args.layout, args.image)
    log_file = args.log or f"{args.network}-{args.layout}-B1-{target.kind}.json"

    print("Extract tasks...")
    tasks, task_weights = auto_scheduler.extract_tasks(mod["main"], params, target)
    for idx, task in enumerate(tasks):
        print(f"========== Task {idx} (workload key: {task.workload_key}) ==========")
        print(task.compute_dag)

    if args.trials > 0:
        print("Begin tuning...")
        resume = log_file if os.path.isfile(log_file) else None  # preloaded, not re-measured
        tuner = auto_scheduler.TaskScheduler(tasks, task_weights, load_log_file=resume)
        tune_option = auto_scheduler.TuningOptions(
            num_measure_trials=max(args.trials, len(tasks)),
            num_measures_per_round=max(1, min(64, args.trials // len(tasks))),
            runner=auto_scheduler.LocalRunner(repeat=1, min_repeat_ms=100),
            measure_callbacks=[auto_scheduler.RecordToFile(log_file)])
        tuner.tune(tune_option)

    print("Compile...")
    with auto_scheduler.ApplyHistoryBest(log_file):
        with transform.PassContext(opt_level=3, config={"relay.backend.use_auto_scheduler": True}):
            lib = relay.build(mod, target=target, params=params)

    dev = templtune.cpu()
    module = graph_executor.GraphModule(lib["default"](dev))
    data = np.random.uniform(size=input_shape).astype("float32")
    module.set_input("data", templtune.nd.array(data))
    module.run()
    out = module.get_output(0).numpy()
    np.testing.assert_allclose(out, relay.evaluate(mod, params, data=data), rtol=1e-3, atol=1e-5)
    assert out.shape == output_shape
    print(f"{lib.num_tuned} of {len(lib.groups)} kernels from tuned records; output matches numpy")

    print("Evaluate inference time cost...")
    ftimer = module.module.time_evaluator("run", dev, repeat=3, min_repeat_ms=500)
    prof_res = np.array(ftimer().results) * 1e3  # convert to millisecond
    print(f"Mean inference time (std dev): {np.mean(prof_res):.2f} ms ({np.std(prof_res):.2f} ms)")


if __name__ == "__main__":
    main()
