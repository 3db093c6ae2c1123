"""Genetic-algorithm tuner.

Deviation from AutoTVM ≥ v0.11 (documented): a child that repeats an already visited config is
re-mutated (one random knob at a time) until it is new, as AutoTVM ≤ v0.10 did, so the GA never
measures a config twice. If re-mutation keeps failing, a random unvisited valid index is used, so
the generation step always terminates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..measure import MeasureInput, MeasureResult
from .index_based import RandomIndexSampler, space_is_valid
from .tuner import Tuner

_REMUTATE_TRIES = 64


class GATuner(Tuner):
    """Tuner using a genetic algorithm over knob vectors.

    Parameters
    ----------
    task : Task
        The task to tune.
    pop_size : int
        Population (generation) size, clamped to the number of valid configs.
    elite_num : int
        Best configs carried into the next selection pool (not re-measured).
    mutation_prob : float
        Per-knob mutation probability of a child.
    seed : int or None
        RNG seed.
    """

    def __init__(self, task: Any, pop_size: int = 100, elite_num: int = 3,
                 mutation_prob: float = 0.1, seed: int | np.random.Generator | None = None,
                 **kwargs: Any) -> None:
        if elite_num > pop_size:
            raise ValueError(f"elite_num ({elite_num}) must not exceed pop_size ({pop_size})")
        super().__init__(task, seed=seed, **kwargs)
        self.n_valid = len(self.space)
        self.pop_size = min(pop_size, self.n_valid)
        self.elite_num = min(self.pop_size, elite_num)
        self.mutation_prob = mutation_prob
        self.dims = list(self.space.dims)
        self._sampler = RandomIndexSampler(self.space, 0, self.space.range_length, self.rng)
        self.elites: list[list[int]] = []
        self.elite_scores: list[float] = []
        self.genes: list[list[int]] = []
        self.scores: dict[int, float] = {}
        self.trial_pt = 0
        self._n_valid_visited = 0
        self._new_generation_random()

    # ---- generation management ---------------------------------------------------------------
    def _visit(self, i: int) -> None:
        if i not in self.visited:
            self.visited.add(i)
            if space_is_valid(self.space, i):
                self._n_valid_visited += 1

    def _remaining(self) -> int:
        return self.n_valid - self._n_valid_visited

    def _new_generation_random(self) -> None:
        idx = []
        while len(idx) < self.pop_size:
            i = self._sampler.draw(self.visited)
            if i is None:
                break
            self._visit(i)
            idx.append(i)
        self._set_genes(idx)

    def _set_genes(self, indices: list[int]) -> None:
        self.genes = [list(self.space.point2knob(i)) for i in indices]
        self._gene_idx = list(indices)
        self.scores = {}
        self.trial_pt = 0

    def mark_visited(self, indices) -> None:
        given = {int(i) for i in indices}
        for i in given:
            self._visit(i)
        # NOTE: resume may mark genes of the current, not yet measured generation: replace them.
        pending = set(self._gene_idx[self.trial_pt:]) & given
        if pending:
            keep = self._gene_idx[:self.trial_pt]
            rest = [i for i in self._gene_idx[self.trial_pt:] if i not in pending]
            for _ in pending:
                j = self._sampler.draw(self.visited)
                if j is None:
                    break
                self._visit(j)
                rest.append(j)
            pt = self.trial_pt
            scores = self.scores
            self._set_genes(keep + rest)
            self.trial_pt, self.scores = pt, scores

    def has_next(self) -> bool:
        return self.trial_pt < len(self.genes) or self._remaining() > 0

    def next_batch(self, batch_size: int) -> list:
        out = []
        if self.trial_pt >= len(self.genes) and self._remaining() > 0 and not self.genes:
            self._new_generation_random()
        while len(out) < batch_size and self.trial_pt < len(self.genes):
            out.append(self.space.get(self._gene_idx[self.trial_pt]))
            self.trial_pt += 1
        return out

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        for inp, res in zip(inputs, results):
            self.scores[int(inp.config.index)] = self._flops(res) if res.ok else 0.0
        if self.trial_pt < len(self.genes) or self._remaining() <= 0:
            return
        if self._remaining() <= self.pop_size:
            # NOTE: few configs left: measure all of them, in ascending index order.
            rest = [i for i in range(self.space.range_length)
                    if i not in self.visited and space_is_valid(self.space, i)]
            for i in rest:
                self._visit(i)
            self._set_genes(rest)
            return
        self._evolve()

    def _evolve(self) -> None:
        pool = self.genes + self.elites
        pool_scores = [self.scores.get(i, 0.0) for i in self._gene_idx] + self.elite_scores
        scores = np.asarray(pool_scores, dtype=np.float64)
        order = np.argsort(-scores, kind="stable")[: self.elite_num]
        self.elites = [list(pool[j]) for j in order]
        self.elite_scores = [float(scores[j]) for j in order]
        probs = scores + 1e-8
        probs = probs / probs.max()
        probs = probs / probs.sum()
        children: list[int] = []
        n_knobs = len(self.dims)
        while len(children) < self.pop_size and self._remaining() > 0:
            if len(pool) >= 2:
                a, b = self.rng.choice(len(pool), size=2, replace=False, p=probs)
                cut = int(self.rng.integers(0, n_knobs)) if n_knobs else 0
                child = list(pool[a][:cut]) + list(pool[b][cut:])
            else:
                child = list(pool[0])
            for k in range(n_knobs):
                if self.rng.random() < self.mutation_prob:
                    child[k] = int(self.rng.integers(0, self.dims[k]))
            idx = self._make_new(child)
            if idx is None:
                break
            self._visit(idx)
            children.append(idx)
        self._set_genes(children)

    def _make_new(self, child: list[int]) -> int | None:
        """Index of ``child``, re-mutated until valid and unvisited (fallback: random draw)."""
        idx = int(self.space.knob2point(child))
        tries = 0
        while (idx in self.visited or not space_is_valid(self.space, idx)) and \
                tries < _REMUTATE_TRIES and self.dims:
            k = int(self.rng.integers(0, len(self.dims)))
            child[k] = int(self.rng.integers(0, self.dims[k]))
            idx = int(self.space.knob2point(child))
            tries += 1
        if idx in self.visited or not space_is_valid(self.space, idx):
            return self._sampler.draw(self.visited)
        return idx
