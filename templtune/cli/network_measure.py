"""tune-network's measuring: the candidates' runner, the compiled network's check and timing."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from templtune.cli.main import CliError

if TYPE_CHECKING:
    from templtune.graph.build import GraphExecutorFactoryModule
    from templtune.graph.ir import Function


def _rpc_address(text: str | None) -> tuple[str | None, int | None]:
    """``HOST:PORT`` / ``ray://HOST:PORT`` / ``auto`` -> (host, port)."""
    if not text:
        return None, None
    host, _, port = text.rpartition(":")
    if host and port.isdigit():
        return host, int(port)
    return text, None


def _runner(args: argparse.Namespace, kind: Any, **local: Any) -> Any:
    """``kind.LocalRunner(**local)``, or with ``--rpc-key`` ``kind.RPCRunner`` on that key
    (``kind``: the autotvm or auto_scheduler module)."""
    if not args.rpc_key:
        return kind.LocalRunner(**local)
    host, port = _rpc_address(args.rpc_address)
    try:
        return kind.RPCRunner(args.rpc_key, host=host, port=port, **local)
    except ImportError as exc:
        raise CliError(str(exc)) from None
    except (RuntimeError, ConnectionError) as exc:  # no device for the key, cluster unreachable
        raise CliError(f"--rpc-key {args.rpc_key}: {exc}") from None


def _check_and_time(args: argparse.Namespace, net: Function, params: dict,
                    inputs: dict[str, tuple[int, ...]], lib: GraphExecutorFactoryModule, t0: float) -> int:
    import templtune
    from templtune import graph

    print(f"compiled {len(lib.groups)} groups ({lib.num_tuned} from tuning records) "
          f"in {time.time() - t0:.1f} s")
    dev = templtune.device(lib.target)
    module = graph.GraphModule(lib["default"](dev))
    rng = np.random.default_rng(args.seed)
    feeds = {k: rng.uniform(size=shape).astype("float32") for k, shape in inputs.items()}
    for k, value in feeds.items():
        module.set_input(k, value)
    module.run()
    expected = graph.evaluate(net, params, **feeds)  # the network as imported
    np.testing.assert_allclose(module.get_output(0).numpy(), expected, rtol=1e-3, atol=1e-5)
    print("check: the compiled network matches numpy")
    ftimer = module.module.time_evaluator("run", dev, repeat=args.timing_repeat,
                                          min_repeat_ms=args.timing_ms)
    res = np.array(ftimer().results) * 1e3
    print(f"Mean inference time (std dev): {res.mean():.2f} ms ({res.std():.2f} ms)"
          + ("" if "emulator" not in module.module.timing else f" [{module.module.timing}]"))
    return 0
