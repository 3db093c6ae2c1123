"""Functions run inside build worker processes (kept import-light and picklable)."""

from __future__ import annotations

import pickle
import time
import traceback
from typing import Any

_DAGS: dict[bytes, Any] = {}


def _dag(blob: bytes) -> Any:
    dag = _DAGS.get(blob)
    if dag is None:
        if len(_DAGS) > 16:
            _DAGS.clear()
        dag = _DAGS[blob] = pickle.loads(blob)
    return dag


def build_state(dag_blob: bytes, steps: list, target: str, is_gpu: bool,
                layout_rewrite: int = 0) -> tuple:
    """Replay ``steps`` (record JSON) on the DAG and build (re-laying the layout-free
    placeholders when ``layout_rewrite``, the task's option, is set). Returns
    ``(error_no, artifact, detail, seconds)``; never raises for a bad candidate."""
    from templtune.errors import CodegenError
    from templtune.measure.measure import MeasureErrorNo

    t0 = time.perf_counter()
    try:
        from .transform_step import decode_step

        dag = _dag(dag_blob)
        state = dag.replay([decode_step(s) for s in steps])
        sch, args = dag.apply_steps_from_state(state, layout_rewrite=layout_rewrite,
                                               is_gpu=is_gpu)
    except Exception as exc:  # noqa: BLE001 - a bad state is data, not a crash
        return (int(MeasureErrorNo.INSTANTIATION_ERROR), None,
                f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}",
                time.perf_counter() - t0)
    try:
        import templtune
        from templtune.measure.worker import export_module

        module = templtune.build(sch, args, target=target)
        # NOTE: export_module pickles a CUDA module (no .export()), keeping its IR for the
        # emulator backend
        return (0, export_module(module), "", time.perf_counter() - t0)
    except CodegenError as exc:
        code = MeasureErrorNo.COMPILE_DEVICE if is_gpu else MeasureErrorNo.COMPILE_HOST
        return (int(code), None, f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001
        return (int(MeasureErrorNo.COMPILE_HOST), None,
                f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}",
                time.perf_counter() - t0)
