"""TaskScheduler: spread one trial budget over several tasks (round-robin or gradient)."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .cost_model import RandomModel, XGBModel
from .measure import ProgramMeasurer
from .measure_record import RecordReader, check_steps, usable_cost
from .search_policy import PreloadMeasuredStates, SketchPolicy

logger = logging.getLogger("auto_scheduler")


class TaskScheduler:
    """Allocate measurement rounds to tasks to minimise the objective (weighted latency).

    Parameters follow TVM: ``strategy`` is ``"gradient"`` or ``"round-robin"``; ``alpha``,
    ``beta`` and ``backward_window_size`` shape the gradient; ``load_log_file`` resumes.
    """

    def __init__(self, tasks: Sequence[Any], task_weights: Sequence[float] | None = None,
                 objective_func: Callable[[list[float]], float] | None = None,
                 strategy: str = "gradient", load_model_file: str | None = None,
                 load_log_file: str | None = None, alpha: float = 0.2, beta: float = 2,
                 gamma: float = 0.5, backward_window_size: int = 3,
                 callbacks: list | None = None, seed: int = 0) -> None:
        if strategy not in ("gradient", "round-robin"):
            raise ValueError(f"invalid strategy {strategy!r}: 'gradient' or 'round-robin'")
        self.tasks = list(tasks)
        self.task_weights = list(task_weights) if task_weights is not None else None
        if objective_func is not None:
            self.objective_func = objective_func
        elif self.task_weights is not None:
            w = self.task_weights
            self.objective_func = lambda costs: float(sum(c * x for c, x in zip(costs, w)))
        else:
            self.objective_func = lambda costs: float(sum(costs))
        self.strategy = strategy
        self.load_model_file, self.load_log_file = load_model_file, load_log_file
        self.alpha, self.beta, self.gamma = alpha, beta, gamma
        self.backward_window_size = backward_window_size
        self.callbacks = callbacks if callbacks is not None else [
            PrintTableInfo(), LogEstimatedLatency("total_latency.tsv")]
        self.rng = np.random.default_rng(seed)
        n = len(self.tasks)
        self.best_costs = np.full(n, 1e10)
        self.task_cts = [0] * n
        self.task_best_cts = [0] * n
        self.task_costs_history: list[list[float]] = [[] for _ in range(n)]
        self.flop_cts = [t.compute_dag.flop_ct for t in self.tasks]
        self.dead_tasks: set[int] = set()
        self.ct = 0
        self.best_ct = 0
        self.best_score = 1e30
        self.cur_score = self._score()
        self.tune_option: Any = None
        self.measurer: Any = None
        self.search_policies: list[SketchPolicy] = []
        self.num_measures_per_round = 0
        self.tic = time.time()

    def _score(self) -> float:
        return self.objective_func(list(self.best_costs))

    def tune(self, tune_option: Any, search_policy: str | list[Any] = "default",
             search_policy_params: dict | None = None, adaptive_training: bool = False,
             per_task_early_stopping: int | None = None) -> None:
        """Tune all tasks with ``tune_option.num_measure_trials`` trials in total."""
        self.tune_option = tune_option
        early_all = 1e20 if tune_option.early_stopping < 0 else tune_option.early_stopping
        self.early_stopping_task = 1e20 if per_task_early_stopping is None \
            else per_task_early_stopping
        self.num_measures_per_round = min(tune_option.num_measures_per_round,
                                          tune_option.num_measure_trials // len(self.tasks))
        if self.num_measures_per_round <= 0:
            raise ValueError(f"num_measure_trials={tune_option.num_measure_trials} is too "
                             f"small: each task needs at least one measurement per round; it "
                             f"should be at least {len(self.tasks)} for this model")
        if self.load_log_file:
            self._restore_status(self.load_log_file, self.num_measures_per_round)
        # NOTE: TVM's other form: one ready policy per task (e.g. with custom sketch rules)
        ready = list(search_policy) if isinstance(search_policy, (list, tuple)) else None
        if ready is not None:
            if len(ready) != len(self.tasks) or not all(isinstance(p, SketchPolicy)
                                                        for p in ready):
                raise ValueError(f"search_policy must be a policy name or one SketchPolicy "
                                 f"per task ({len(self.tasks)}), got {search_policy!r}")
        elif search_policy in ("default", "sketch.xgb"):
            model: Any = XGBModel(num_warmup_sample=len(self.tasks) * self.num_measures_per_round,
                                  adaptive_training=adaptive_training)
            if self.load_model_file and os.path.isfile(self.load_model_file):
                model.load(self.load_model_file)
            elif self.load_log_file:
                model.update_from_file(self.load_log_file)
        elif search_policy == "sketch.random":
            model = RandomModel(int(self.rng.integers(1 << 30)))
        else:
            raise ValueError(f"invalid search policy {search_policy!r}")
        cbs = [PreloadMeasuredStates(self.load_log_file)] if self.load_log_file else []
        self.search_policies = ready or [
            SketchPolicy(t, model, params=search_policy_params,
                         seed=int(self.rng.integers(1 << 30)), verbose=0,
                         init_search_callbacks=cbs) for t in self.tasks]
        self.measurer = ProgramMeasurer(tune_option.builder, tune_option.runner,
                                        tune_option.measure_callbacks, tune_option.verbose)
        try:
            for i in range(len(self.tasks)):
                if self.task_cts[i] == 0:
                    self._tune_task(i)
                    if self.best_costs[i] >= 1e10:
                        self.dead_tasks.add(i)
            rr = 0
            while self.ct < tune_option.num_measure_trials and \
                    len(self.dead_tasks) < len(self.tasks):
                if self.strategy == "round-robin":
                    alive = [i for i in range(len(self.tasks)) if i not in self.dead_tasks]
                    idx = alive[rr % len(alive)]
                    rr += 1
                else:
                    idx = self._pick_by_gradient()
                self._tune_task(idx)
                if self.cur_score < self.best_score:
                    self.best_score, self.best_ct = self.cur_score, self.ct
                elif self.ct - self.best_ct >= early_all and all(
                        c < 1e9 for c in self.best_costs):
                    break
        finally:
            self.measurer.close()

    def _pick_by_gradient(self) -> int:
        n = len(self.tasks)
        grads = np.zeros(n)
        for i in range(n):
            if i in self.dead_tasks:
                continue
            c = self.best_costs.copy()
            c2 = c.copy()
            c2[i] -= 1e-4
            chain = (self.objective_func(list(c)) - self.objective_func(list(c2))) / 1e-4
            hist = self.task_costs_history[i]
            w = self.backward_window_size
            t = self.task_cts[i]
            backward = (hist[t - 1] - hist[t - 1 - w]) / w if t - 1 - w >= 0 and \
                len(hist) > t - 1 else 0.0
            g1 = c[i] - c[i] / max(1, t)
            g2 = self.beta * 1e30
            forward = min(g1, g2) - c[i]
            grads[i] = chain * (self.alpha * backward + (1 - self.alpha) * forward)
        alive = [i for i in range(n) if i not in self.dead_tasks]
        vals = grads[alive]
        if np.all(vals == vals[0]):
            return alive[int(self.rng.integers(len(alive)))]
        return alive[int(np.argmin(vals))]

    def _tune_task(self, i: int) -> None:
        for cb in self.callbacks:
            cb.pre_tune(self, i)
        inputs, results = self.search_policies[i].continue_search_one_round(
            self.num_measures_per_round, self.measurer)
        self.task_cts[i] += 1
        for res in results:
            if res.error_no == 0 and res.mean_cost < self.best_costs[i]:
                self.best_costs[i] = res.mean_cost
                self.task_best_cts[i] = self.task_cts[i]
        no_change = (self.task_cts[i] - self.task_best_cts[i]) * self.num_measures_per_round
        if not inputs or no_change > self.early_stopping_task:
            self.dead_tasks.add(i)
        self.task_costs_history[i].append(float(self.best_costs[i]))
        self.ct += len(inputs)
        self.cur_score = self._score()
        for cb in self.callbacks:
            cb.post_tune(self, i)

    def _restore_status(self, log_file: str, per_round: int) -> None:
        keys = {t.workload_key: k for k, t in enumerate(self.tasks)}
        target = str(self.tasks[0].target)
        counts = [0] * len(self.tasks)
        best_cts = [0] * len(self.tasks)
        for inp, res in RecordReader(log_file):
            k = keys.get(inp.task.workload_key)
            if k is None or str(inp.task.target) != target:
                continue
            counts[k] += 1
            cost = usable_cost(res)  # NaN, zero or negative costs must not become best
            if cost is not None and cost < self.best_costs[k] and check_steps(
                    self.tasks[k].compute_dag, inp.state.transform_steps) is None:
                self.best_costs[k] = cost
                best_cts[k] = counts[k]
        for k in range(len(self.tasks)):
            if counts[k] - best_cts[k] > self.early_stopping_task:
                self.dead_tasks.add(k)
            self.task_cts[k] = int(counts[k] / per_round + 0.5)
            self.task_best_cts[k] = int(best_cts[k] / per_round + 0.5)
            self.task_costs_history[k] = [float(self.best_costs[k])] * self.task_cts[k]
        self.cur_score = self._score()


class TaskSchedulerCallback:
    def pre_tune(self, scheduler: TaskScheduler, task_id: int) -> None:
        pass

    def post_tune(self, scheduler: TaskScheduler, task_id: int) -> None:
        pass


class PrintTableInfo(TaskSchedulerCallback):
    """Print the per-task table (ID, description, latency, GFLOPS, trials) before each round."""

    def pre_tune(self, scheduler: TaskScheduler, task_id: int) -> None:
        if scheduler.tune_option is None or not scheduler.tune_option.verbose:
            return
        lines = ["|  ID  | Task Description | Latency (ms) | Speed (GFLOPS) | Trials |",
                 "-" * 70]
        for i, t in enumerate(scheduler.tasks):
            c = scheduler.best_costs[i]
            lat = f"{c * 1e3:.3f}" if c < 1e9 else "-"
            speed = f"{scheduler.flop_cts[i] / c / 1e9:.2f}" if c < 1e9 else "-"
            desc = (t.desc or t.workload_key)[:16]
            lines.append(f"| {i:4d} | {desc:>16} | {lat:>12} | {speed:>14} | "
                         f"{scheduler.task_cts[i] * scheduler.num_measures_per_round:6d} |")
        total = scheduler.cur_score
        lines.append("-" * 70)
        lines.append("Estimated total latency: "
                     + (f"{total * 1e3:.3f} ms" if total < 1e9 else "-")
                     + f"\tTrials: {scheduler.ct}\tUsed time : {time.time() - scheduler.tic:.0f}"
                     + f" s\tNext ID: {task_id}")
        print("\n".join(lines))


class LogEstimatedLatency(TaskSchedulerCallback):
    """Append ``ElapsedTime(s) ... EstimatedLatency(ms) ... Trials`` lines to a file."""

    def __init__(self, log_file: str) -> None:
        self.log_file = log_file
        if os.path.exists(log_file):
            os.remove(log_file)

    def post_tune(self, scheduler: TaskScheduler, task_id: int) -> None:
        total = scheduler.cur_score
        lat = f"{total * 1e3:.3f}" if total < 1e9 and not math.isinf(total) else "N/A"
        with open(self.log_file, "a", encoding="utf-8") as f:
            f.write(f"ElapsedTime(s)\t{time.time() - scheduler.tic:.0f}\tEstimatedLatency(ms)"
                    f"\t{lat}\tTrials\t{scheduler.ct}\n")
