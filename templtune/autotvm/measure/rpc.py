"""``RPCRunner``: AutoTVM's remote runner name.

templtune has no home-made RPC tracker; remote measurement is meant to go through Ray (the
``[distributed]`` extra). That backend is not implemented yet, so constructing an ``RPCRunner``
fails with a clear message instead of an ``AttributeError`` on ``autotvm.RPCRunner``.
"""

from __future__ import annotations

from typing import Any

from .measure import Runner


class RPCRunner(Runner):
    """Placeholder for a Ray-backed remote runner (AutoTVM's ``RPCRunner`` signature).

    Raises
    ------
    ImportError
        When ray is not installed (``pip install templtune[distributed]``).
    NotImplementedError
        Otherwise: the Ray backend is not available in this version; use ``LocalRunner``.
    """

    def __init__(self, key: str, host: str | None = None, port: int | None = None,
                 priority: int = 1, timeout: float = 10, n_parallel: int | None = None,
                 number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.1, enable_cpu_cache_flush: bool = False,
                 module_loader: Any = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise ImportError("RPCRunner measures on remote devices through Ray; install the "
                              "'distributed' extra (pip install templtune[distributed]) or use "
                              "LocalRunner") from exc
        raise NotImplementedError("the Ray-backed RPCRunner is not implemented yet; use "
                                  "LocalRunner on the device machine")

    def run(self, measure_inputs, build_results):  # pragma: no cover - never constructed
        raise NotImplementedError
