"""Special input buffers of a task (TVM's ``register_task_input_buffer``): data that a
workload must be measured with instead of random tensors (e.g. the index arrays of a sparse
kernel), registered per workload key and input (placeholder) name.

Files written with ``save_to_file`` use TVM's name and text format,
``{name}.{d0}_{d1}_..._{dtype}.npy`` in the current directory, so a resumed tuning session
(either tool's) finds them again.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from templtune.errors import TempltuneError

__all__ = ["TaskInputError", "get_task_input_buffer", "register_task_input_buffer"]

# NOTE: a registry, like the workload registry: {workload_key: {input_name: array}}; the
# "default" entry holds buffers registered before the workload key is known.
_TABLE: dict[str, dict[str, Any]] = {}


class TaskInputError(TempltuneError, RuntimeError):
    """A task input buffer is registered twice without ``overwrite``."""


def _numpy(data: Any) -> np.ndarray:
    return np.asarray(data.numpy() if hasattr(data, "numpy") else data)


def _file_name(name: str, arr: np.ndarray) -> str:
    return f"{name}." + "".join(f"{d}_" for d in arr.shape) + f"{arr.dtype}.npy"


def _save(name: str, data: Any) -> None:
    arr = _numpy(data)
    arr.tofile(_file_name(name, arr), " ")


def _load(name: str) -> np.ndarray | None:
    for file in sorted(os.listdir()):
        if file.startswith(name + ".") and file.endswith(".npy"):
            meta = file.split(".")[-2].split("_")
            try:
                shape = [int(d) for d in meta[:-1]]
                return np.fromfile(file, dtype=meta[-1], sep=" ").reshape(shape)
            except (TypeError, ValueError):
                continue  # a file of another format that happens to share the prefix
    return None


def register_task_input_buffer(workload_key: str, input_name: str, input_data: Any,
                               overwrite: bool = False, save_to_file: bool = False) -> Any:
    """Register ``input_data`` as the buffer of input ``input_name`` of ``workload_key``.

    Parameters
    ----------
    workload_key : str
        The task's workload key (``"default"`` for any task).
    input_name : str
        The placeholder's name.
    input_data : array or NDArray
    overwrite : bool
        Replace a buffer already registered under the name.
    save_to_file : bool
        Also write it to ``{name}.{shape}_{dtype}.npy`` in the current directory.

    Returns
    -------
    The registered data.

    Raises
    ------
    TaskInputError
        If the name is registered for the workload and ``overwrite`` is False.
    """
    table = _TABLE.setdefault(workload_key, {})
    if input_name in table and not overwrite:
        raise TaskInputError(f"task input {input_name!r} is already registered for workload "
                             f"{workload_key}; pass overwrite=True to replace it")
    table[input_name] = input_data
    if save_to_file:
        _save(input_name, input_data)
    return input_data


def get_task_input_buffer(workload_key: str, input_name: str) -> Any:
    """The buffer registered for ``input_name`` of ``workload_key``: from the registry, else
    from a file saved by ``save_to_file``, else from the ``"default"`` entry.

    Raises
    ------
    ValueError
        If none is found.
    """
    table = _TABLE.setdefault(workload_key, {})
    if input_name not in table:
        loaded = _load(input_name)
        if loaded is not None:
            table[input_name] = loaded
    if input_name in table:
        return table[input_name]
    default = _TABLE.get("default", {})
    if input_name in default:
        return default[input_name]
    raise ValueError(f"task input {input_name!r} of workload {workload_key} is not registered; "
                     "provide it with SearchTask(..., task_inputs={...})")
