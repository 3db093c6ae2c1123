"""Pre-tuned reference logs (TVM's "tophub", offline).

Reference logs are AutoTVM JSON-lines files under ``<dir>/<target key>/*.log``, where the search
directories are, in order, those listed in ``TEMPLTUNE_REFERENCE_LOG_DIR`` (``os.pathsep``
separated), ``templtune/logs`` and the ``logs/`` folder next to the package (a source checkout).

They serve two purposes: the root fallback context answers a miss from them before building a
plain fallback config, and templates may call
``cfg.fallback_with_reference_log(load_reference_log(target, "conv2d_NCHWc.x86"))`` to adapt a
similar workload's config. Both are off with ``TEMPLTUNE_NO_TOPHUB=1`` or
``autotvm.env.set_use_reference_logs(False)``.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from templtune import config
from templtune.autotvm import env
from templtune.autotvm.task.target_compat import as_target, target_keys

logger = logging.getLogger("autotvm")


def reference_log_dirs() -> list[Path]:
    """Directories searched for reference logs (existing ones only)."""
    dirs = list(config.get("TEMPLTUNE_REFERENCE_LOG_DIR"))
    pkg = Path(__file__).resolve().parents[2]  # .../templtune
    dirs += [pkg / "logs", pkg.parent / "logs"]
    # NOTE: the pre-tuned logs ship inside the templates package (templates/logs/<key>/*.log);
    # locate it by spec so autotvm does not import the (higher-level) templates.
    spec = importlib.util.find_spec("templtune.templates")
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p) / "logs" for p in spec.submodule_search_locations]
    return [d for d in dirs if d.is_dir()]


def reference_log_files(target: Any) -> list[Path]:
    """Reference log files for the keys of ``target`` (empty when switched off)."""
    if not env.reference_logs_enabled():
        return []
    files: list[Path] = []
    for key in target_keys(as_target(target)):
        for d in reference_log_dirs():
            sub = d / key
            if sub.is_dir():
                files += sorted(sub.glob("*.log"))
    return files


def load_reference_log(target: Any, workload_name: str) -> list[tuple[Any, Any]]:
    """Successful reference records of task ``workload_name`` for ``target``'s keys."""
    from templtune.autotvm.record import load_from_file

    out = []
    for f in reference_log_files(target):
        for inp, res in load_from_file(f):
            if inp.task.name == workload_name and int(res.error_no) == 0:
                out.append((inp, res))
    return out


def reference_context(target: Any) -> Any:
    """An ``ApplyHistoryBest`` over the reference logs of ``target``, or None if there are
    none."""
    files = reference_log_files(target)
    if not files:
        return None
    from templtune.autotvm.dispatcher import ApplyHistoryBest

    logger.debug("reference logs for %s: %s", target, [str(f) for f in files])
    return ApplyHistoryBest([str(f) for f in files])
