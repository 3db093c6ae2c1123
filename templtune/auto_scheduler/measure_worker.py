"""The auto-scheduler's candidate: how a measurement worker rebuilds a state (import-light)."""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from templtune.errors import InstantiationError
from templtune.measure.candidate import Candidate, Instance

_DAGS: dict[bytes, Any] = {}


def _dag(blob: bytes) -> Any:
    dag = _DAGS.get(blob)
    if dag is None:
        if len(_DAGS) > 16:
            _DAGS.clear()
        dag = _DAGS[blob] = pickle.loads(blob)
    return dag


@dataclass(frozen=True, slots=True)
class StateCandidate(Candidate):
    """A state of a SearchTask: its pickled DAG and its transform steps (record JSON), built for
    ``target`` (re-laying the layout-free placeholders when ``layout_rewrite``, the task's
    option, is set)."""

    dag_blob: bytes
    steps: tuple[Any, ...]
    target_str: str
    workload_key: str
    is_gpu: bool = False
    layout_rewrite: int = 0

    def instantiate(self) -> Instance:
        try:
            from .transform_step import decode_step

            dag = _dag(self.dag_blob)
            state = dag.replay([decode_step(s) for s in self.steps])
            sch, args = dag.apply_steps_from_state(state, layout_rewrite=self.layout_rewrite,
                                                   is_gpu=self.is_gpu)
        except Exception as exc:  # noqa: BLE001 - a bad state is data, not a crash
            raise InstantiationError(f"cannot replay the state: {type(exc).__name__}: "
                                     f"{exc}") from exc
        return Instance(sch, list(args), self.target_str)

    def reference_args(self) -> list[Any]:
        # NOTE: the naive schedule of the DAG (its init state) computes the reference.
        dag = _dag(self.dag_blob)
        return list(dag.apply_steps_from_state(dag.get_init_state())[1])

    @property
    def target(self) -> str:
        return self.target_str

    @property
    def task_key(self) -> Hashable:
        return (self.workload_key, self.target_str)

    @property
    def label(self) -> str:
        h = hashlib.sha1(json.dumps(self.steps, default=str).encode()).hexdigest()[:8]
        return f"state {h}"
