"""Auto-scheduler cost model quality: per-store features (XGBModel) vs the old state features.

Two steps:

* ``record``: sample ``--count`` distinct states of dense ``--n``^3 (``out = data @ weight.T``,
  as ``benchmarks/auto_scheduler.py``) from the SketchPolicy's initial population plus one or
  two mutations of them (a mix of random and search-like states), measure them with the real
  builder/runner and append the records to ``--log``;
* ``eval``: for ``--splits`` random train/test splits of the log (``--train`` fraction), train
  the per-store ``XGBModel`` and a pack-free XGBoost model on the old fixed-length state
  features (templtune's previous model, kept here for the comparison) with the same labels and
  weights, and report on the held-out states the Spearman rank correlation with the measured
  throughput and the top-k recall (how many of the k truly best held-out states are among the k
  best predicted), medians over the splits.

Run (1-thread kernels, so that the other tenants of a shared machine disturb the timings
less)::

    export TEMPLTUNE_NUM_THREADS=1
    python benchmarks/as_cost_model.py record --n 512 --count 128 --seed 1 --log d512.json
    python benchmarks/as_cost_model.py eval --n 512 --log d512.json
    # measurement noise: measure 40 of the states again, then test on those
    python benchmarks/as_cost_model.py record --n 512 --count 40 --again d512.json --log d512b.json
    python benchmarks/as_cost_model.py compare d512.json d512b.json
    python benchmarks/as_cost_model.py eval --n 512 --log d512.json --again d512b.json

The scores are properties of the models on one log; the measurements in the log depend on the
machine's load (``compare`` shows how much: the Spearman correlation of two measurements of
the same states is the ceiling any model can reach).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

from templtune import auto_scheduler, te


@auto_scheduler.register_workload("bench_cm_dense", override=True)
def dense(M, N, K):
    data = te.placeholder((M, K), name="data")
    weight = te.placeholder((N, K), name="weight")
    k = te.reduce_axis((0, K), name="k")
    out = te.compute((M, N), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k), name="out",
                     attrs={"layout_free_placeholders": [weight]})
    return [data, weight, out]


def _task(n: int) -> auto_scheduler.SearchTask:
    return auto_scheduler.SearchTask(func=dense, args=(n, n, n), target="llvm")


def record(args: argparse.Namespace) -> None:
    from templtune.auto_scheduler.feature import state_key
    from templtune.auto_scheduler.measure import LocalBuilder, LocalRunner, ProgramMeasurer

    task = _task(args.n)
    pol = auto_scheduler.SketchPolicy(task, seed=args.seed, verbose=0)
    rng = np.random.default_rng(args.seed)
    pop = pol.sample_initial_population(args.count)
    states, seen = [], set()
    for s in pop:
        for _ in range(int(rng.integers(0, 3))):
            m = pol._mutate(s)
            s = m if m is not None else s
        k = state_key(s)
        if k not in seen:
            seen.add(k)
            states.append(s)
    states = states[:args.count]
    if args.again:
        # NOTE: measure the states of an existing log again: the Spearman correlation of two
        # measurements of the same states is the ceiling any model can reach on this machine
        prev, _ = auto_scheduler.RecordReader(args.again).read_lines()
        states = [task.compute_dag.replay(i.state.transform_steps) for i in prev][:args.count]
    if args.with_init:
        states.insert(0, task.compute_dag.get_init_state())
    measurer = ProgramMeasurer(LocalBuilder(timeout=30),
                               LocalRunner(timeout=30, number=2, repeat=3, min_repeat_ms=0),
                               [auto_scheduler.RecordToFile(args.log)], verbose=1)
    t0 = time.time()
    inputs, results = measurer.measure(task, pol, states)
    ok = sum(r.error_no == 0 for r in results)
    print(f"measured {len(inputs)} states ({ok} valid) in {time.time() - t0:.0f} s -> "
          f"{args.log}")
    measurer.close()


# ---- the previous state features (templtune before per-store features), for comparison ----
_MAX_STAGES, _MAX_ITERS, _MAX_SPLITS = 8, 16, 32


def state_features(state) -> np.ndarray:
    f = np.zeros(_MAX_STAGES * (_MAX_ITERS * 3 + 2) + _MAX_SPLITS * 4, dtype=np.float32)
    comp = [st for st in state.stages if st.op_type == 1][-_MAX_STAGES:]
    w = _MAX_ITERS * 3 + 2
    for si, st in enumerate(comp):
        base = si * w
        f[base] = st.compute_at
        f[base + 1] = math.log2(st.auto_unroll_max_step + 1)
        for ii, it in enumerate(st.iters[-_MAX_ITERS:]):
            f[base + 2 + ii * 3] = math.log2((it.range or 1) + 1)
            f[base + 3 + ii * 3] = it.annotation
            f[base + 4 + ii * 3] = it.iter_kind
    off = _MAX_STAGES * w
    n = 0
    for s in state.transform_steps:
        lens = getattr(s, "lengths", None)
        if isinstance(lens, tuple) and n < _MAX_SPLITS:
            for j, x in enumerate(lens[:4]):
                f[off + n * 4 + j] = math.log2((x or 1) + 1)
            n += 1
    return f


def _old_model(xs: np.ndarray, y: np.ndarray, seed: int):
    import xgboost as xgb

    params = {"max_depth": 10, "gamma": 0.001, "min_child_weight": 0, "eta": 0.2,
              "nthread": 1, "verbosity": 0, "seed": seed, "objective": "reg:squarederror"}
    return xgb.train(params, xgb.DMatrix(xs, label=y, weight=np.maximum(y, 1e-3)),
                     num_boost_round=200)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    return float(np.corrcoef(ra, rb)[0, 1])


def _recall(pred: np.ndarray, y: np.ndarray, k: int) -> float:
    return len(set(np.argsort(-pred)[:k]) & set(np.argsort(-y)[:k])) / k


def _key(state) -> str:
    return str([st.encode() for st in state.transform_steps])


def evaluate(args: argparse.Namespace) -> None:
    from templtune.auto_scheduler.cost_model import XGBModel
    from templtune.auto_scheduler.feature import normalized_throughputs

    task = _task(args.n)
    dag = task.compute_dag
    inputs, results = auto_scheduler.RecordReader(args.log).read_lines()
    ok = [k for k, r in enumerate(results) if r.error_no == 0]
    inputs = [auto_scheduler.MeasureInput(task, dag.replay(inputs[k].state.transform_steps))
              for k in ok]
    results = [results[k] for k in ok]
    y, _ = normalized_throughputs(inputs, results)
    t0 = time.perf_counter()
    old_x = np.stack([state_features(dag.infer_bound_from_state(i.state)) for i in inputs])
    t1 = time.perf_counter()
    costs = np.array([r.mean_cost for r in results])
    print(f"{len(inputs)} valid states; best {dag.flop_ct / costs.min() / 1e9:.1f} GFLOPS, "
          f"worst {dag.flop_ct / costs.max() / 1e9:.2f}")
    splits = []  # (train indices, test indices, measured throughput of the test states)
    if args.again:
        # NOTE: the states measured twice are the test set, scored against the geometric mean
        # of both measurements (less noisy than either); the model trains on all the others
        again = {_key(i.state): r.mean_cost
                 for i, r in zip(*auto_scheduler.RecordReader(args.again).read_lines())
                 if r.error_no == 0}
        te_ = np.array([k for k, i in enumerate(inputs) if _key(i.state) in again])
        tr = np.array([k for k in range(len(inputs)) if k not in set(te_.tolist())])
        second = np.array([again[_key(inputs[k].state)] for k in te_])
        truth = 1 / np.sqrt(costs[te_] * second)
        print(f"test: {len(te_)} states measured twice (repeatability spearman "
              f"{_spearman(1 / costs[te_], 1 / second):.3f}), train: {len(tr)}")
        splits.append((tr, te_, truth))
    else:
        for sp in range(args.splits):
            perm = np.random.default_rng(1000 + sp).permutation(len(inputs))
            n_tr = int(len(inputs) * args.train)
            splits.append((perm[:n_tr], perm[n_tr:], y[perm[n_tr:]]))
    rows = {"per-store XGBModel": [], "state features (old)": []}
    fit_s = []
    for sp, (tr, te_, truth) in enumerate(splits):
        model = XGBModel(num_warmup_sample=-1, seed=sp + 1)
        model.params["nthread"] = 1
        t = time.perf_counter()
        model.update([inputs[k] for k in tr], [results[k] for k in tr])
        fit_s.append(time.perf_counter() - t)
        p_new = model.predict(task, [inputs[k].state for k in te_])
        y_tr = y[tr] / y[tr].max()
        p_old = _old_model(old_x[tr], y_tr, sp + 1).inplace_predict(old_x[te_])
        k = max(1, len(te_) // 8)
        for name, p in (("per-store XGBModel", p_new), ("state features (old)", p_old)):
            rows[name].append((_spearman(p, truth), _recall(p, truth, k)))
    print(f"{len(splits)} split(s), train {len(tr)} states, test {len(te_)}, top-k recall with "
          f"k = {k}; update (features + fit) median {np.median(fit_s):.2f} s; old features "
          f"{1e3 * (t1 - t0) / len(inputs):.1f} ms/state")
    print(f"{'model':<22} {'spearman (median)':>18} {'min':>6} {'top-k recall (median)':>22}")
    for name, r in rows.items():
        a = np.array(r)
        print(f"{name:<22} {np.median(a[:, 0]):>18.3f} {a[:, 0].min():>6.3f} "
              f"{np.median(a[:, 1]):>22.3f}")


def _state_feature_model(seed: int, warmup: int):
    """An XGBModel scoring states from the old state features (one row per state, so the
    pack-sum objective is plain weighted squared error): the same trainer, the old features."""
    from templtune.auto_scheduler.cost_model import XGBModel
    from templtune.auto_scheduler.measure import MAX_FLOAT

    class StateFeatureModel(XGBModel):
        def _rows(self, task, states):
            dag = task.compute_dag
            out = []
            for s in states:
                s = s if hasattr(s, "stages") else dag.replay(s.transform_steps)
                out.append(state_features(dag.infer_bound_from_state(s))[None, :])
            return out

        def _add_pairs(self, inputs, results):
            for inp, res, x in zip(inputs, results,
                                   self._rows(inputs[0].task, [i.state for i in inputs])
                                   if inputs else []):
                self.keys.append(inp.task.workload_key)
                self.xs.append(x)
                self.costs.append(res.mean_cost if res.error_no == 0 else MAX_FLOAT)

        def predict(self, task, states):
            if self.bst is None or len(self.xs) <= self.num_warmup_sample:
                return self.rng.random(len(states))
            return self.predict_features(self._rows(task, states))

    return StateFeatureModel(num_warmup_sample=warmup, seed=seed)


def search(args: argparse.Namespace) -> None:
    """Best GFLOPS after ``--trials`` measured states of a SketchPolicy guided by each model."""
    from templtune.auto_scheduler.cost_model import XGBModel
    from templtune.auto_scheduler.measure import LocalBuilder, LocalRunner

    task = _task(args.n)
    res: dict[str, list[tuple[float, float]]] = {"per-store XGBModel": [],
                                                 "state features (old)": []}
    for seed in range(args.seeds):
        for name in res:
            model = (XGBModel(num_warmup_sample=args.per_round, seed=seed + 1)
                     if name.startswith("per-store")
                     else _state_feature_model(seed + 1, args.per_round))
            pol = auto_scheduler.SketchPolicy(task, model, seed=seed, verbose=0)
            opt = auto_scheduler.TuningOptions(
                num_measure_trials=args.trials, num_measures_per_round=args.per_round,
                verbose=0, builder=LocalBuilder(timeout=30),
                runner=LocalRunner(timeout=30, number=2, repeat=1, min_repeat_ms=0))
            t0 = time.perf_counter()
            task.tune(opt, search_policy=pol)
            wall = time.perf_counter() - t0
            best = task.compute_dag.flop_ct * max(pol.measured_throughputs, default=0.0)
            res[name].append((best / 1e9, wall))
            print(f"seed {seed} {name:<22} best {best / 1e9:6.2f} GFLOPS, wall {wall:.0f} s",
                  flush=True)
    for name, r in res.items():
        a = np.array(r)
        print(f"{name:<22} median best {np.median(a[:, 0]):6.2f} GFLOPS, median wall "
              f"{np.median(a[:, 1]):.0f} s")


def timing(args: argparse.Namespace) -> None:
    """Per-state cost of the features the search pays for every candidate it scores."""
    from templtune.auto_scheduler.feature import lower_state
    from templtune.auto_scheduler.feature_row import features_of_body

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from auto_scheduler import CONV, conv2d_bias_relu  # the benchmark's conv2d layer

    tasks = {f"dense {args.n}^3": _task(args.n),
             "conv2d+bias+relu": auto_scheduler.SearchTask(func=conv2d_bias_relu, args=CONV,
                                                           target="llvm")}
    for name, task in tasks.items():
        dag = task.compute_dag
        pol = auto_scheduler.SketchPolicy(task, seed=0, verbose=0)
        states = pol.sample_initial_population(args.count)
        res: dict[str, list[float]] = {"replay + lower": [], "per-store rows": [],
                                       "old state features": []}
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            bodies = [lower_state(dag, s, False, task.layout_rewrite_option) for s in states]
            t1 = time.perf_counter()
            rows = [features_of_body(b) for b in bodies]
            t2 = time.perf_counter()
            for s in states:
                state_features(s)
            t3 = time.perf_counter()
            for k, dt in zip(res, (t1 - t0, t2 - t1, t3 - t2)):
                res[k].append(1e3 * dt / len(states))
        n_rows = np.mean([len(r) for r in rows])
        print(f"{name}: {len(states)} states, {n_rows:.1f} stores each, medians of "
              f"{args.rounds} interleaved rounds (ms/state)")
        for k, v in res.items():
            print(f"  {k:<20} {np.median(v):8.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--n", type=int, default=512)
    r.add_argument("--count", type=int, default=128)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--log", required=True)
    r.add_argument("--with-init", action="store_true", help="also measure the naive state")
    r.add_argument("--again", metavar="LOG", help="measure the first --count states of LOG")
    c = sub.add_parser("compare", help="Spearman of the throughputs of two logs of the same "
                       "states (measurement repeatability)")
    c.add_argument("logs", nargs=2)
    e = sub.add_parser("eval")
    e.add_argument("--n", type=int, default=512)
    e.add_argument("--log", required=True)
    e.add_argument("--train", type=float, default=0.5)
    e.add_argument("--splits", type=int, default=10)
    e.add_argument("--again", metavar="LOG", help="a log of some of the same states measured "
                   "again: test on those (truth: geometric mean of both), train on the rest")
    q = sub.add_parser("search", help="best GFLOPS of searches guided by each model")
    q.add_argument("--n", type=int, default=256)
    q.add_argument("--trials", type=int, default=48)
    q.add_argument("--per-round", type=int, default=16)
    q.add_argument("--seeds", type=int, default=3)
    t = sub.add_parser("timing", help="per-state feature cost on dense and the conv layer")
    t.add_argument("--n", type=int, default=1024)
    t.add_argument("--count", type=int, default=100)
    t.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if args.cmd == "timing":
        timing(args)
    elif args.cmd == "search":
        search(args)
    elif args.cmd == "compare":
        costs = []
        for f in args.logs:
            ins, res = auto_scheduler.RecordReader(f).read_lines()
            costs.append({str([st.encode() for st in i.state.transform_steps]): r.mean_cost
                          for i, r in zip(ins, res) if r.error_no == 0})
        common = sorted(set(costs[0]) & set(costs[1]))
        a = np.array([costs[0][k] for k in common])
        b = np.array([costs[1][k] for k in common])
        print(f"{len(common)} states in both logs: spearman {_spearman(1 / a, 1 / b):.3f}, "
              f"median |log2 ratio| {np.median(np.abs(np.log2(a / b))):.3f}")
    elif args.cmd == "record":
        if os.path.exists(args.log):
            print(f"appending to {args.log}", file=sys.stderr)
        record(args)
    else:
        evaluate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
