"""Shared by the network-op tests: build a network at opt_level 3 and run it once (and
check a blocked one against the numpy interpreter)."""

from __future__ import annotations

import numpy as np

import templtune
from templtune import graph, relay, transform
from templtune.graph.ir import Function


def build_run(func: Function, params: dict[str, np.ndarray], feeds: dict[str, np.ndarray],
              target: str = "llvm") -> tuple[np.ndarray, graph.GraphExecutorFactoryModule]:
    """``(output, lib)``: ``func`` built for ``target`` with ``params`` bound, run on
    ``feeds`` through TVM's ``graph_executor`` names."""
    from templtune.contrib import graph_executor

    dev = templtune.cpu(0) if target == "llvm" else templtune.cuda(0)
    with transform.PassContext(opt_level=3):
        lib = relay.build(func, target=target, params=params)
    m = graph_executor.GraphModule(lib["default"](dev))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    return m.get_output(0).numpy(), lib


def check_blocked_network(mod: Function, params: dict[str, np.ndarray],
                          x: np.ndarray | None = None, fused: bool = True) -> list[str]:
    """Build ``mod`` at opt_level 3 (NCHW[x]c), run it on ``x`` (default: seeded normal) as
    ``data`` and check it against the numpy interpreter; with ``fused``, the blocked tails
    (bias, residual add, relu ...) must be fused into the conv kernels. Returns each group's
    implementation."""
    from templtune.graph import reference

    if x is None:
        x = np.random.default_rng(0).standard_normal(mod.params[0].shape).astype(np.float32)
    out, lib = build_run(mod, params, {"data": x})
    np.testing.assert_allclose(out, reference.evaluate(mod, params, data=x), rtol=1e-4,
                               atol=1e-5)
    assert not fused or all(len(g.steps) == 1 for g in lib.groups
                            if g.impl == "autotvm:conv2d_NCHWc"
                            and g.group.calls[-1].op != "layout_transform")
    return [g.impl for g in lib.groups]
