"""SketchPolicy (sketches + random annotation + evolutionary search + ε-greedy), EmptyPolicy,
PreloadMeasuredStates."""

from __future__ import annotations

import json
import logging
import random
import sys
from typing import Any

import numpy as np

from templtune.target import kind_of

from .cost_model import RandomModel
from .gpu_limits import GpuLimitFilter
from .init_rules import sample_one
from .loop_state import State
from .mutation import (
    mutate_auto_unroll,
    mutate_compute_location,
    mutate_parallel,
    mutate_tile_size,
)
from .parallel_degree import worth_measuring
from .sketch import CPU_RULES, GPU_RULES, generate_sketches
from .tile_prior import MIDDLE_LEVEL_ONE_SHARE, cpu_vector

logger = logging.getLogger("auto_scheduler")

# NOTE: TVM's defaults, except the two population sizes: candidates are replayed in Python
# here, so 2048-state populations would dominate the tuning time (deviation, documented).
DEFAULT_PARAMS = {
    "eps_greedy": 0.05,
    "retry_search_one_round_on_empty": 1,
    "sample_init_min_population": 50,
    "sample_init_use_measured_ratio": 0.2,
    "evolutionary_search_population": 256,
    "evolutionary_search_num_iters": 4,
    "evolutionary_search_mutation_prob": 0.85,
    "cpu_multi_level_tiling_structure": "SSRSRS",
    "gpu_multi_level_tiling_structure": "SSSRRSRS",
    "max_innermost_split_factor": 64,
    "max_vectorize_size": 16,
    "disable_change_compute_location": 0,
}

# NOTE: deviations from TVM's CPU defaults (a user's ``params`` still override them; the
# measurements behind each are in benchmarks/results/auto_scheduler.txt):
# - innermost tiles are register blocks, so tiles of up to 64 x 64 accumulators (TVM's 64)
#   would spill and waste trials: the limit is 16;
# - ``cpu_register_tile_prior`` (new): the share of initial samples whose innermost tiles are
#   register blocks with a >= 8-step inner reduction and unroll 64/512 (.tile_prior); the other
#   samples stay uniform, so the whole space remains reachable;
# - ``cpu_middle_level_one`` (new): the share of the prior's samples whose SSRSRS middle spatial
#   level is 1 (tile_prior.MIDDLE_LEVEL_ONE_SHARE says why only a share);
# - ``cpu_parallel_all_cores`` (new): sampled and mutated states whose reduction stages run under
#   a parallel loop shorter than the cores are dropped (.parallel_degree says why).
CPU_PARAMS = {"max_innermost_split_factor": 16, "cpu_register_tile_prior": 0.8,
              "cpu_middle_level_one": MIDDLE_LEVEL_ONE_SHARE, "cpu_parallel_all_cores": 1}


def state_key(state: Any) -> str:
    """De-duplication key: the encoded step list."""
    return json.dumps([s.encode() for s in state.transform_steps])


class PreloadMeasuredStates:
    """Init-search callback: states measured in ``filename`` are never measured again, and the
    valid ones seed the evolutionary search."""

    def __init__(self, filename: str) -> None:
        self.filename = filename

    def __call__(self, policy: SketchPolicy) -> None:
        from .measure_record import RecordReader, check_steps, usable_cost

        kind = kind_of(policy.task.target)
        n = 0
        for inp, res in RecordReader(self.filename):
            if inp.task.workload_key != policy.task.workload_key or \
                    kind_of(inp.task.target) != kind:
                continue
            cost = usable_cost(res)
            if res.error_no == 0 and cost is None:
                continue  # a success with nonsense costs is no measurement: measure again
            if check_steps(policy.dag, inp.state.transform_steps) is not None:
                continue  # steps of another shape, or that no longer replay
            try:
                state = policy.dag.replay(inp.state.transform_steps)
            except Exception:  # noqa: BLE001 - a record that no longer replays
                continue
            key = state_key(state)
            if key in policy.measured_keys:
                continue
            policy.measured_keys.add(key)
            n += 1
            if cost is not None:
                policy.measured_states.append(state)
                policy.measured_throughputs.append(1.0 / cost)
        logger.info("PreloadMeasuredStates: %d states from %s", n, self.filename)


class EmptyPolicy:
    """Always proposes the init state (for tests)."""

    def __init__(self, task: Any, init_search_callbacks: Any = None) -> None:
        self.task = task

    def continue_search_one_round(self, num_measure: int, measurer: Any) -> tuple[list, list]:
        """One round for the TaskScheduler: measure the init state. Returns
        ``(inputs, results)``."""
        # NOTE: this used to be a verbatim copy of SketchPolicy's round, which read attributes
        # (params, cost_model, ...) EmptyPolicy never has; like TVM's EmptyPolicy, a round
        # measures the one state this policy proposes.
        return measurer.measure(self.task, self, [self.task.compute_dag.get_init_state()])

    def search(self, n_trials: int, early_stopping: int, per_round: int, measurer: Any) -> State:
        st = self.task.compute_dag.get_init_state()
        if n_trials > 1:
            measurer.reset()
            ct = 0
            while ct < n_trials:
                measurer.measure(self.task, self, [st])
                ct += 1
        return st


class SketchPolicy:
    """Template-free search: sketches, random annotation, evolution guided by a cost model.

    Parameters
    ----------
    task : SearchTask
    program_cost_model : CostModel
        ``RandomModel()`` by default.
    params : dict, optional
        Overrides of :data:`DEFAULT_PARAMS`.
    seed : int, optional
    verbose : int
    init_search_callbacks : list, optional
        E.g. ``[PreloadMeasuredStates(log)]``; run before the search starts.
    """

    logger = logger

    def __init__(self, task: Any, program_cost_model: Any = None, params: dict | None = None,
                 seed: int | None = None, verbose: int = 1,
                 init_search_callbacks: Any = None) -> None:
        self.task = task
        self.dag = task.compute_dag
        self.cost_model = program_cost_model or RandomModel(seed)
        # NOTE: user-supplied, heterogeneous values (TVM's params dict): a true seam.
        self.params: dict[str, Any] = dict(DEFAULT_PARAMS)
        if not task.is_gpu:
            self.params.update(CPU_PARAMS)
        self.params.update(params or {})
        self.seed = seed if seed is not None else random.randint(1, 2**30)
        self.rng = np.random.default_rng(self.seed)
        self.verbose = verbose
        self.is_gpu = task.is_gpu
        self.num_cores = max(1, task.hardware_params.num_cores)
        self._vector = None if self.is_gpu else cpu_vector(task)
        # NOTE: GPU states over the block limits are dropped before measurement (.gpu_limits)
        self.gpu_limits = GpuLimitFilter(task) if self.is_gpu else None
        self.structure = self.params["gpu_multi_level_tiling_structure" if self.is_gpu
                                     else "cpu_multi_level_tiling_structure"]
        self.measured_keys: set[str] = set()
        self.measured_states: list[State] = []
        self.measured_throughputs: list[float] = []
        self._sketches: list[State] | None = None
        # NOTE: PreloadCustomSketchRule callbacks append here; tried before the built-in rules
        self.custom_sketch_rules: list[Any] = []
        for cb in init_search_callbacks or []:
            cb(self)

    # ---- generation ---------------------------------------------------------------------------
    def generate_sketches(self, print_for_debug: bool = False) -> list[State]:
        if self._sketches is None:
            rules = tuple(self.custom_sketch_rules) + (GPU_RULES if self.is_gpu else CPU_RULES)
            self._sketches = generate_sketches(self, self.dag.get_init_state(), rules)
        if print_for_debug:
            for s in self._sketches:
                print(s)
        return self._sketches

    def sample_initial_population(self, size: int | None = None) -> list[State]:
        sketches = self.generate_sketches()
        if not sketches:
            return []
        want = size or self.params["sample_init_min_population"]
        out: list[State] = []
        keys: set[str] = set()
        fails = 0
        while len(out) < want and fails < 5:
            got = 0
            for _ in range(max(want, 16)):
                sk = sketches[int(self.rng.integers(len(sketches)))]
                s = sample_one(self, sk, self.rng)
                if s is None:
                    continue
                k = state_key(s)
                if k in keys or not self._fits(s, k):
                    continue
                keys.add(k)
                out.append(s)
                got += 1
                if len(out) >= want:
                    break
            fails = 0 if got else fails + 1
            if not got:
                want = max(1, want // 2)
        return out

    def _mutate(self, s: State) -> State | None:
        rules = [(mutate_tile_size, 0.90), (mutate_auto_unroll, 0.04 if not self.is_gpu
                                             else 0.10)]
        if not self.is_gpu:
            rules.append((mutate_parallel, 0.01))
            if not self.params["disable_change_compute_location"]:
                rules.append((mutate_compute_location, 0.05))
        w = np.array([x[1] for x in rules])
        f = rules[int(self.rng.choice(len(rules), p=w / w.sum()))][0]
        try:
            child = f(self, s, self.rng)
        except Exception:  # noqa: BLE001 - invalid mutation
            return None
        return child if worth_measuring(self, child) else None

    def evolutionary_search(self, init_population: list[State], out_size: int) -> list[State]:
        n_iters = self.params["evolutionary_search_num_iters"]
        if isinstance(self.cost_model, RandomModel):
            n_iters = min(n_iters, 2)
        elif getattr(self.cost_model, "warming_up", False):
            # NOTE: a learned model that has not seen enough samples scores at random; evolving
            # under random scores only drifts away from the initial population's priors
            # (register-sized tiles), so its warm-up rounds measure initial samples.
            n_iters = 0
        pop_size = self.params["evolutionary_search_population"]
        heap: dict[str, tuple[float, State]] = {}
        pop = list(init_population)
        for it in range(n_iters + 1):
            if not pop:
                break
            scores = np.asarray(self.cost_model.predict(self.task, pop), dtype=np.float64)
            for s, sc in zip(pop, scores):
                k = state_key(s)
                if k in self.measured_keys:
                    continue
                if k not in heap or heap[k][0] < sc:
                    heap[k] = (float(sc), s)
            if len(heap) > out_size:
                heap = dict(sorted(heap.items(), key=lambda kv: -kv[1][0])[:out_size])
            if it == n_iters:
                break
            w = np.maximum(scores, 0) + 1e-12
            p = w / w.sum()
            nxt: list[State] = []
            tries = 0
            while len(nxt) < pop_size and tries < pop_size * 4:
                tries += 1
                parent = pop[int(self.rng.choice(len(pop), p=p))]
                if self.rng.random() < self.params["evolutionary_search_mutation_prob"]:
                    child = self._mutate(parent)
                    if child is None:
                        continue
                    nxt.append(child)
                else:
                    nxt.append(parent)
            pop = nxt
        return [s for _, s in sorted(heap.values(), key=lambda x: -x[0])]

    def search_one_round(self, num_random_states: int) -> tuple[list[State], list[State]]:
        init = self.sample_initial_population()
        n_meas = min(len(self.measured_states),
                     int(self.params["sample_init_use_measured_ratio"]
                         * self.params["evolutionary_search_population"]))
        if n_meas:
            order = np.argsort(-np.array(self.measured_throughputs))[:n_meas]
            init = init + [self.measured_states[i] for i in order]
        rand = [init[int(self.rng.integers(len(init)))] for _ in range(num_random_states)] \
            if init else []
        return self.evolutionary_search(init, 2 * self._per_round), rand

    def _pick(self, best: list[State], rand: list[State], n: int) -> list[State]:
        num_random = int(self.params["eps_greedy"] * self._per_round)
        out: list[State] = []
        bi = ri = 0
        while len(out) < n and (bi < len(best) or ri < len(rand)):
            prefer_best = len(out) < self._per_round - num_random
            if (prefer_best and bi < len(best)) or ri >= len(rand):
                s = best[bi]
                bi += 1
            else:
                s = rand[ri]
                ri += 1
            k = state_key(s)
            if k in self.measured_keys or not self._fits(s, k):
                continue
            self.measured_keys.add(k)
            out.append(s)
        return out

    def _fits(self, state: State, key: str) -> bool:
        """Whether a state may be measured: on GPU, within the target's block limits."""
        return self.gpu_limits is None or self.gpu_limits.fits(state, key)

    def _record_measured(self, inputs: list, results: list) -> None:
        """Keep the states that measured without error, with their throughput."""
        for inp, res in zip(inputs, results):
            if res.error_no == 0:
                self.measured_states.append(inp.state)
                self.measured_throughputs.append(1.0 / res.mean_cost)

    def continue_search_one_round(self, num_measure: int, measurer: Any) -> tuple[list, list]:
        """One round for the TaskScheduler: search, measure ``num_measure`` states, update the
        cost model right away. Returns ``(inputs, results)``."""
        self._per_round = num_measure
        num_random = int(self.params["eps_greedy"] * num_measure)
        best, rand = self.search_one_round(num_random * 3)
        picked = self._pick(best, rand, num_measure)
        if not picked:
            return [], []
        inputs, results = measurer.measure(self.task, self, picked)
        self._record_measured(inputs, results)
        self.cost_model.update(inputs, results)
        return inputs, results

    def search(self, n_trials: int, early_stopping: int, per_round: int,
               measurer: Any) -> State | None:
        """Search, measuring up to ``n_trials`` states; returns the best measured state."""
        self._per_round = per_round
        if n_trials <= 1:
            best, _ = self.search_one_round(0)
            return best[0] if best else None
        num_random = int(self.params["eps_greedy"] * per_round)
        stop = early_stopping if early_stopping >= 0 else 1 << 60
        measurer.reset()
        ct, retries = 0, 0
        inputs: list = []
        results: list = []
        key = self.task.workload_key
        while ct < n_trials:
            if inputs:
                self.cost_model.update(inputs, results)
            best, rand = self.search_one_round(num_random * 3)
            picked = self._pick(best, rand, min(per_round, n_trials - ct))
            if not picked:
                retries += 1
                if retries > self.params["retry_search_one_round_on_empty"]:
                    if self.verbose:
                        print("All candidates in the search space have been measured.")
                    break
                continue
            if self.verbose:
                sys.stdout.write(f"Measure {len(picked)} states (trials {ct}..)\n")
            inputs, results = measurer.measure(self.task, self, picked)
            ct += len(inputs)
            self._record_measured(inputs, results)
            if key in measurer.has_valid and ct - measurer.best_ct.get(key, ct) > stop:
                if self.verbose:
                    print("Stop early since no performance improvement in the last "
                          f"{stop} measurements")
                break
        return measurer.best_state.get(key)
