"""TVM's ``topi.sparse.utils``: make a network's dense layers block-sparse.

A facade over :mod:`templtune.graph.sparse` (the conversion) and the auto-scheduler (the
sketch rules), ranked with ``relay`` in the layering.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune.auto_scheduler.search_callback import PreloadCustomSketchRule
from templtune.auto_scheduler.sketch import follow_tiling, multi_level_tiling, single_ew_consumer
from templtune.graph.ir import Function, Var
from templtune.graph.sparse import bsr_dense_convert, simplify_fc_transpose_convert
from templtune.topi.sparse import BSRMatrix, dense_to_bsr, random_bsr_matrix

__all__ = ["BSRMatrix", "convert_model_dense_to_sparse", "dense_to_bsr",
           "random_bsr_matrix", "random_sparse_dense_params", "sparse_sketch_rules"]

#: the stage name of topi.nn.sparse_dense's compute
_SPARSE_STAGE = "T_sparse_dense"


def random_sparse_dense_params(func: Function, params: dict[str, Any], bs_r: int, bs_c: int,
                               density: float, seed: int = 0) -> dict[str, Any]:
    """``params`` with the constant weight of every ``nn.dense`` replaced by a random matrix
    whose ``(bs_r, bs_c)`` blocks are nonzero with about ``density`` (TVM's helper of the
    same name; a weight the blocks do not divide is kept)."""
    rng = np.random.default_rng(seed)
    out = dict(params)
    for c in func.calls():
        w = c.args[1] if c.op == "nn.dense" else None
        if not isinstance(w, Var) or w.name not in params:
            continue
        n, k = w.shape
        if n % bs_r or k % bs_c:
            continue
        out[w.name] = random_bsr_matrix(n, k, bs_r, bs_c, density, w.dtype, rng=rng).todense()
    return out


def convert_model_dense_to_sparse(mod: Function, params: dict[str, Any],
                                  random_params: bool = False, bs_r: int = 1,
                                  sparsity: float = 0.85, layout: str = "NHWC"
                                  ) -> tuple[Function, dict[str, Any]]:
    """Convert the dense layers of a network to block-sparse ``nn.sparse_dense`` (blocks
    ``(bs_r, 1)``), as TVM's ``tune_network_x86`` tutorial does with ``use_sparse=True``.

    Parameters
    ----------
    mod : Function
        The network.
    params : dict of str to array
        Its parameters.
    random_params : bool
        Replace the dense weights by random ones of the given ``sparsity`` first (the
        tutorial's way to get a sparse network from a dense model zoo).
    bs_r : int
        Rows per block.
    sparsity : float
        The fraction of zero blocks of the random weights.
    layout : str
        The network's data layout; accepted for TVM's signature (only dense layers convert).

    Returns
    -------
    (Function, dict)
        The converted network and its parameters.
    """
    del layout  # NOTE: TVM converts 1x1 convolutions too only for its sparse conv2d
    func = mod["main"] if isinstance(mod, Function) else mod
    func, params = simplify_fc_transpose_convert(func, params)
    if random_params:
        params = random_sparse_dense_params(func, params, bs_r, 1, 1.0 - sparsity)
    return bsr_dense_convert(func, params, (bs_r, 1), sparsity_threshold=0.8)


def _meet_sparse(policy: Any, state: Any, stage_id: int) -> int:
    stage = state.stages[stage_id]
    if stage.op_type == 0 or stage.op_name != _SPARSE_STAGE:
        return PreloadCustomSketchRule.PASS
    return PreloadCustomSketchRule.APPLY_AND_SKIP_REST


def _apply_sparse(policy: Any, state: Any, stage_id: int) -> list[list[Any]]:
    """Multi-level tiling of the rows and columns around the guarded block reduction, with
    the element-wise consumer (bias, activation) fused at each spatial level, and a variant
    without fusion; no rfactor or cache stages (the reduction's extent is a bound, not the
    row's length, so factoring it only adds guarded work)."""
    tiled, steps = multi_level_tiling(state, stage_id, policy.structure)
    out: list[list[Any]] = [[tiled, stage_id - 1]]
    c = single_ew_consumer(state, stage_id)
    if c is None or not steps or len(state.stages[c].iters) != len(steps):
        return out
    for level in (1, 2):
        if policy.structure[level - 1] != "S":
            continue
        fused = follow_tiling(tiled, c, steps, level)
        out.append([fused.compute_at(stage_id, c, level * len(steps) - 1), stage_id - 1])
    return out


def sparse_sketch_rules() -> list[PreloadCustomSketchRule]:
    """The auto-scheduler sketch rules for ``nn.sparse_dense`` tasks: pass them as
    ``SketchPolicy(task, init_search_callbacks=sparse_sketch_rules())`` (TVM's
    ``tune_network_x86`` does so for every task; other stages keep the built-in rules)."""
    return [PreloadCustomSketchRule(_meet_sparse, _apply_sparse, "SparseDense")]
