"""Encoding and strict decoding of one AutoTVM log line (the schema is in
:mod:`templtune.autotvm.record`).

Kept apart from the file I/O there: this is the type-strict reading of a single JSON object,
used by the loaders and by anything that holds a record in a string.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from templtune.autotvm.config_entity import ConfigEntity
from templtune.autotvm.task.target_compat import as_target
from templtune.autotvm.task.task import serialize_args
from templtune.measure.measure import AUTOTVM_ERROR_COST

# NOTE: one logger name for every part of the record module, as before it was split.
logger = logging.getLogger("autotvm.record")

__all__ = ["AUTOTVM_LOG_VERSION", "encode", "decode"]

AUTOTVM_LOG_VERSION = 0.2
ERROR_COST = AUTOTVM_ERROR_COST
_MAX_DETAIL = 1024
#: the largest thread count a record may name (a bigger one is a corrupt line, not a machine)
MAX_THREADS = 4096

Record = tuple[Any, Any]


def _version() -> str:
    from templtune import __version__

    return str(__version__)


def _json_arg(x: Any) -> Any:
    """JSON form of :func:`serialize_args`'s output (symbolic vars as their names)."""
    if isinstance(x, tuple):
        return [_json_arg(a) for a in x]
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    return str(x)


def encode(inp: Any, result: Any, protocol: str = "json") -> str:
    """One log line (without the newline) for a measurement."""
    if protocol != "json":
        raise ValueError(f"unsupported record protocol {protocol!r} (only 'json'; no pickle)")
    err = int(result.error_no)
    costs = [ERROR_COST] if err != 0 else [float(c) for c in result.costs]
    row: dict[str, Any] = {
        "input": [str(inp.target), inp.task.name, _json_arg(serialize_args(inp.task.args)),
                  dict(getattr(inp.task, "kwargs", {}) or {})],
        "config": inp.config.to_json_dict(),
        "result": [costs, err, float(result.all_cost), float(result.timestamp)],
        "version": AUTOTVM_LOG_VERSION,
        "tvm_version": _version(),
    }
    detail = getattr(result, "error_detail", "")
    if err != 0 and detail:
        row["error_detail"] = str(detail)[:_MAX_DETAIL]
    if not getattr(result, "checked", True):
        row["checked"] = False
    if getattr(result, "infra_error", False):
        row["infra_error"] = True
    if getattr(result, "device", ""):
        row["device"] = str(result.device)
    if err == 0 and int(getattr(result, "threads", 0) or 0) > 0:
        row["threads"] = int(result.threads)
    return json.dumps(row)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _plain_args(x: Any) -> bool:
    """JSON scalars and lists only: workloads are dictionary keys (an object is unhashable)."""
    if isinstance(x, list):
        return all(_plain_args(a) for a in x)
    return x is None or isinstance(x, (str, int, float, bool))


def _device(x: Any) -> str:
    if not isinstance(x, str):
        raise TypeError(f"device must be a string, got {_short(x)}")
    return x


def _threads(x: Any) -> int:
    if not _is_int(x) or not 0 < x <= MAX_THREADS:
        raise ValueError(f"threads must be an integer in 1..{MAX_THREADS}, got {_short(x)}")
    return int(x)


def _finite(x: float, what: str) -> float:
    if not math.isfinite(x):
        raise ValueError(f"{what} is not finite ({x})")
    return x


def _short(x: Any, width: int = 80) -> str:
    s = repr(x)
    return s if len(s) <= width else s[:width - 3] + "..."

def decode(row: str, protocol: str = "json") -> Record | None:
    """Parse one log line into ``(MeasureInput, MeasureResult)``.

    Returns None for a row of the unsupported 0.1 format. Raises ``ValueError`` (or
    ``KeyError``/``TypeError``) on a malformed row.
    """
    return _decode(row, protocol, {})


def _decode(row: str, protocol: str, targets: dict[str, Any]) -> Record | None:
    from templtune.autotvm.measure.candidate import MeasureInput
    from templtune.autotvm.task.task import Task
    from templtune.measure.measure import MeasureResult

    if protocol != "json":
        raise ValueError(f"unsupported record protocol {protocol!r} (only 'json')")
    obj = json.loads(row)
    if not isinstance(obj, dict):
        raise ValueError("a record must be a JSON object")
    if "v" in obj and obj["v"] == 0.1:
        return None
    tgt_str, name, args, _kwargs = obj["input"]
    if not isinstance(tgt_str, str) or not isinstance(name, str) or not isinstance(args, list):
        raise TypeError("input must be [target string, task name, [args], {}]")
    if "-target" in tgt_str:
        logger.warning("'-target' in a logged target string is deprecated; read as '-mtriple'")
        tgt_str = tgt_str.replace("-target", "-mtriple")
    if not isinstance(tgt_str, str) or not isinstance(name, str) or not isinstance(args, list):
        raise TypeError("input must be [target string, task name, [args], {}]")
    if not _plain_args(args):
        raise TypeError("task arguments must be numbers, strings, null or lists of them")
    task = Task(name, serialize_args(args))
    if not isinstance(obj["config"], dict) or not _is_int(obj["config"].get("index")):
        raise TypeError("config must be an object with an integer index")
    config = ConfigEntity.from_json_dict(obj["config"])
    costs, error_no, all_cost, timestamp = obj["result"]
    if not isinstance(costs, list) or not all(_is_number(c) for c in costs):
        raise TypeError(f"costs must be a list of numbers, got {_short(costs)}")
    if not _is_int(error_no):
        raise TypeError(f"error_no must be an integer, got {_short(error_no)}")
    if not (_is_number(all_cost) and _is_number(timestamp)):
        raise TypeError("all_cost and timestamp must be numbers")
    # NOTE: float() of a huge JSON integer raises OverflowError: the line is skipped.
    res = MeasureResult(tuple(float(c) for c in costs), error_no, float(all_cost),
                        _finite(float(timestamp), "timestamp"),
                        str(obj.get("error_detail", "")),
                        obj.get("checked", True) is not False, obj.get("infra_error") is True,
                        _device(obj.get("device", "")),
                        _threads(obj["threads"]) if "threads" in obj else 0)
    config.cost = sum(res.costs) / len(res.costs) if res.costs else float("inf")
    # NOTE: target strings repeat on every line; parse each once per loader.
    target = targets.get(tgt_str)
    if target is None:
        target = targets[tgt_str] = as_target(tgt_str)
    task.target = target
    return MeasureInput(target, task, config), res
