"""HardwareParams, SearchTask and TuningOptions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from templtune.target import capabilities

from .compute_dag import ComputeDAG
from .workload_registry import make_workload_key, register_workload_tensors

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class HardwareParams:
    """Hardware facts the search uses (defaults per target as in TVM)."""

    num_cores: int = -1
    vector_unit_bytes: int = 64
    cache_line_bytes: int = 64
    max_shared_memory_per_block: int = 0
    max_local_memory_per_block: int = 0
    max_threads_per_block: int = 0
    max_vthread_extent: int = 0
    warp_size: int = 0

    def to_list(self) -> list[int]:
        return [self.num_cores, self.vector_unit_bytes, self.cache_line_bytes,
                self.max_shared_memory_per_block, self.max_local_memory_per_block,
                self.max_threads_per_block, self.max_vthread_extent, self.warp_size]

    @staticmethod
    def default_for(target: Any) -> HardwareParams:
        caps = capabilities(target)
        if caps.is_gpu:
            warp = caps.warp_size
            return HardwareParams(-1, 16, 64, caps.max_shared_memory_per_block, INT32_MAX,
                                  caps.max_threads_per_block, warp // 4, warp)
        # NOTE: as TVM, the cores of the machine (not -num-cores, the kernels' thread count).
        return HardwareParams(capabilities("llvm").cores, 64, 64, 0, 0, 0, 0, 0)


def is_gpu_target(target: Any) -> bool:
    """Whether ``target`` (a Target or target string) is a GPU (its capability record)."""
    return capabilities(target).is_gpu


def _target(t: Any) -> Any:
    from templtune.target import Target

    return t if isinstance(t, Target) else Target(t)


class SearchTask:
    """One tuning task of the auto-scheduler: a ComputeDAG on a target.

    Parameters
    ----------
    func : callable or str, optional
        A registered workload function (or its name); the key is ``[name, *args]``.
    args : tuple, optional
        Arguments of ``func``.
    compute_dag : ComputeDAG, optional
        Derived from the workload key when not given.
    workload_key : str, optional
        Instead of ``func``/``args``.
    target : str or Target
        Required.
    hardware_params : HardwareParams, optional
        Defaults from the target.
    layout_rewrite_option : int, optional
        1 (INSERT_TRANSFORM_STAGE) for llvm, else 0: the layout-free placeholders of the
        workload (compute attribute ``layout_free_placeholders``) are re-laid to follow the
        tiles inside the kernel, for measurement and ``apply_best`` (see
        :mod:`templtune.auto_scheduler.layout_rewrite`).
    task_inputs : dict, optional
        ``{placeholder name: array}``, registered with :func:`register_task_input_buffer`
        (``task_inputs_overwrite``, ``task_inputs_save_to_file``); the local runner measures
        with them (other inputs random); records keep the names.
    desc : str
    """

    def __init__(self, func: Any = None, args: Any = None, compute_dag: ComputeDAG | None = None,
                 workload_key: str | None = None, target: Any = None, target_host: Any = None,
                 hardware_params: HardwareParams | None = None,
                 layout_rewrite_option: int | None = None, task_inputs: dict | None = None,
                 task_inputs_overwrite: bool = False, task_inputs_save_to_file: bool = False,
                 desc: str = "") -> None:
        if target is None:
            raise ValueError("SearchTask needs a target")
        if func is not None:
            workload_key = make_workload_key(func, args or ())
        if workload_key is None:
            if compute_dag is None:
                raise ValueError("SearchTask needs func= (with args=), workload_key= or "
                                 "compute_dag=")
            workload_key = compute_dag.workload_key()
            register_workload_tensors(workload_key, compute_dag.tensors)
        self.workload_key = workload_key
        self.compute_dag = compute_dag if compute_dag is not None else ComputeDAG(workload_key)
        self.target = _target(target)
        self.target_host = _target(target_host) if target_host is not None else None
        self.hardware_params = hardware_params or HardwareParams.default_for(self.target)
        if self.hardware_params.num_cores < 0 and not is_gpu_target(self.target):
            self.hardware_params = HardwareParams.default_for(self.target)
        if layout_rewrite_option is None:
            layout_rewrite_option = 0 if self.is_gpu else 1
        self.layout_rewrite_option = int(layout_rewrite_option)
        if task_inputs:
            from .task_input import register_task_input_buffer

            for name, data in task_inputs.items():
                register_task_input_buffer(workload_key, name, data, task_inputs_overwrite,
                                           task_inputs_save_to_file)
        self.task_input_names = tuple(sorted(task_inputs or {}))
        self.desc = desc

    @property
    def is_gpu(self) -> bool:
        return is_gpu_target(self.target)

    def tune(self, tuning_options: TuningOptions, search_policy: Any = None,
             adaptive_training: bool = False) -> Any:
        """Search for good schedules, measuring ``tuning_options.num_measure_trials``."""
        from .cost_model import XGBModel
        from .search_policy import SketchPolicy

        if search_policy is None:
            search_policy = SketchPolicy(self, XGBModel(adaptive_training=adaptive_training))
        from .measure import ProgramMeasurer

        measurer = ProgramMeasurer(tuning_options.builder, tuning_options.runner,
                                   tuning_options.measure_callbacks, tuning_options.verbose)
        try:
            return search_policy.search(tuning_options.num_measure_trials,
                                        tuning_options.early_stopping,
                                        tuning_options.num_measures_per_round, measurer)
        finally:
            measurer.close()

    def apply_best(self, log_file: str, include_compatible: bool = False,
                   layout_rewrite_option: Any = None) -> tuple[Any, list[Any]]:
        """``(schedule, args)`` of the best record for this task in ``log_file``."""
        from .measure_record import load_best_record

        inp, _ = load_best_record(log_file, self.workload_key, self.target,
                                  include_compatible=include_compatible, dag=self.compute_dag)
        if inp is None:
            raise RuntimeError(f"cannot find any valid schedule for {self.workload_key} in "
                               f"{log_file}")
        state = self.compute_dag.replay(inp.state.transform_steps)
        lro = self.layout_rewrite_option if layout_rewrite_option is None \
            else layout_rewrite_option
        return self.compute_dag.apply_steps_from_state(state, layout_rewrite=lro,
                                                       is_gpu=self.is_gpu)

    def print_best(self, log_file: str, print_mode: str = "schedule") -> str:
        """The best schedule as Python te code (``"schedule"``) or CUDA source (``"cuda"``)."""
        from .measure_record import load_best_record

        inp, _ = load_best_record(log_file, self.workload_key, self.target,
                                  dag=self.compute_dag)
        if inp is None:
            raise RuntimeError(f"cannot find any valid schedule for {self.workload_key} in "
                               f"{log_file}")
        state = self.compute_dag.replay(inp.state.transform_steps)
        if print_mode == "schedule":
            return self.compute_dag.print_python_code_from_state(state)
        if print_mode == "cuda":
            import templtune

            if not self.is_gpu:
                raise ValueError("print_mode='cuda' needs a CUDA task")
            sch, args = self.compute_dag.apply_steps_from_state(state, is_gpu=True)
            return templtune.build(sch, args, target=self.target).get_source()
        raise ValueError(f"invalid print_mode {print_mode!r}: 'schedule' or 'cuda'")

    def __getstate__(self) -> dict:
        return {"workload_key": self.workload_key, "dag": self.compute_dag,
                "target": str(self.target),
                "target_host": str(self.target_host) if self.target_host else None,
                "hw": self.hardware_params, "lro": self.layout_rewrite_option,
                "tin": self.task_input_names, "desc": self.desc}

    def __setstate__(self, d: dict) -> None:
        import json

        from .workload_registry import WORKLOAD_FUNC_REGISTRY

        try:
            name = json.loads(d["workload_key"])[0]
        except (ValueError, IndexError, TypeError):
            name = d["workload_key"]
        if name not in WORKLOAD_FUNC_REGISTRY:
            register_workload_tensors(d["workload_key"], d["dag"].tensors)
        self.workload_key = d["workload_key"]
        self.compute_dag = d["dag"]
        self.target = _target(d["target"])
        self.target_host = _target(d["target_host"]) if d["target_host"] else None
        self.hardware_params = d["hw"]
        self.layout_rewrite_option = d["lro"]
        self.task_input_names = d["tin"]
        self.desc = d["desc"]

    def __repr__(self) -> str:
        return f"SearchTask({self.workload_key}, target={self.target})"


class TuningOptions:
    """Options of ``SearchTask.tune`` (defaults as TVM's)."""

    def __init__(self, num_measure_trials: int = 0, early_stopping: int | None = None,
                 num_measures_per_round: int = 64, verbose: int = 1, builder: Any = "local",
                 runner: Any = "local", measure_callbacks: Any = None) -> None:
        from templtune.measure.measure import resolve_local

        from .measure import LocalBuilder, LocalRunner

        builder, runner = resolve_local(builder, runner, LocalBuilder, LocalRunner)
        self.num_measure_trials = int(num_measure_trials)
        self.early_stopping = -1 if early_stopping is None else int(early_stopping)
        self.num_measures_per_round = int(num_measures_per_round)
        self.verbose = verbose
        self.builder = builder
        self.runner = runner
        self.measure_callbacks = list(measure_callbacks or [])
