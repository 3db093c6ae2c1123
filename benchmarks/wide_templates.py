"""TVM-scale ("wide") knob spaces over the library's x86 dense and conv2d_nchw kernels.

The library templates (``templates/x86/dense.py``, ``conv2d_nchw.py``) keep small filtered spaces
(hundreds of configs or fewer) in which random search does well. AutoTVM's own x86 spaces for
these layers are thousands to tens of thousands of mostly unfiltered points, where good configs
are rare and a tuner's search actually matters. The templates here define such wide spaces and
then run the *library's own template body* on the chosen point, so the kernels are exactly the
library's (its best config is a point of the wide space):

* ``sample_efficiency/dense_wide``: ``tile_y`` split in 3 (``[mo, mb, rb]``), ``tile_x`` in 2
  (``[no, bn]``) and ``tile_k`` in 2 (``[ko, ku]``), all divisor splits, unfiltered except for
  a compile-size cap (below). On 1024^3: 66 * 11 * 11 = 7986 points before the cap.
* ``sample_efficiency/conv2d_wide``: the library's ``tile_oc``/``tile_oh``/``tile_ow``/
  ``tile_ic``/``unroll_kw`` knobs without their filters, plus ``reorder_r``: the order of the
  accumulator's four reduction loops (``rco, ry, rx, rci``; 24 permutations, the library's
  order is the identity), applied to the library's schedule after its body returns.

NOTE: the only filter is a cap on the size of the unrolled register block (unrolled loop
extents times vector registers per row), which bounds LLVM compile time: without it a point
such as ``rb = ku = 1024, bn = 1024`` unrolls a million vector statements and the builder times
out (AutoTVM spends its 10 s build timeout on such points; here that would dominate the
benchmark's wall time). Points under the cap still include register-spilling blocks, scalar
(``bn = 1``) and badly-ordered kernels: good points stay rare.

How the body is reused: the wide template defines its knobs on the real config, then runs the
library body under :class:`_Fixed`, a config view whose ``define_*``/``multi_filter`` calls are
no-ops and whose ``cfg[name]`` reads the wide config's entities.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# NOTE: through the installed package name, never the repo's top-level ``templates``: two
# module objects for one template file would register its templates twice in one process.
from templtune import autotvm  # noqa: E402
from templtune.autotvm.dispatcher import ApplyConfig  # noqa: E402
from templtune.autotvm.space import _ConfigBase  # noqa: E402
from templtune.autotvm.task.entities import SplitEntity  # noqa: E402
from templtune.templates.x86 import conv2d_nchw as _conv_mod  # noqa: E402
from templtune.templates.x86 import dense as _dense_mod  # noqa: E402
from templtune.templates.x86._common import pad_tuple, stride_pair, vec_regs  # noqa: E402

#: cap on unrolled statements of the register block, counted in 8-lane (AVX2) vector registers
MAX_UNROLLED_REGS = 1024

#: the 24 orders of the conv accumulator's reduction loops (index into ``(rco, ry, rx, rci)``)
REDUCE_ORDERS: list[tuple[int, ...]] = list(itertools.permutations(range(4)))


class _Fixed(_ConfigBase):
    """A read-only view of a config for running a library template body on a wide-space point.

    ``define_*`` and ``multi_filter`` do nothing (the knobs are already defined by the wide
    template); ``cfg[name]``, ``add_flop`` and ``raise_error`` go to the wrapped config."""

    _collect = False

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner
        self._entity_map = inner._entity_map
        self.errors = inner.errors

    def multi_filter(self, filter: Callable[[Mapping[str, Any]], bool]) -> None:  # noqa: A002
        return None

    def add_flop(self, flop: Any) -> None:
        self._inner.add_flop(flop)


def _run_body(cfg: Any, body: Callable[..., Any], *args: Any,
              entities: Mapping[str, Any] | None = None) -> Any:
    """Run ``body`` on ``cfg``'s point; ``entities`` replace some of its entities (the body's
    form of a knob the wide space defines differently)."""
    fixed = _Fixed(cfg)
    if entities:
        fixed._entity_map = {**fixed._entity_map, **entities}
    with ApplyConfig(fixed):
        return body(*args)


@autotvm.template("sample_efficiency/dense_wide")
def dense_wide(M: int, N: int, K: int) -> Any:  # noqa: N803 - TVM names
    """``out = data @ weight.T`` with the library's packed-weight kernel over a wide space."""
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", M, num_outputs=3)
    cfg.define_split("tile_x", N, num_outputs=2)
    cfg.define_split("tile_k", K, num_outputs=2)
    # NOTE: unrolled block = rb rows x ku steps x ceil(bn / 8) vectors (plus the accumulator
    # init/store of rb x bn); see the module docstring for why this is the only filter.
    cfg.multi_filter(lambda e: e["tile_y"].size[-1] * e["tile_k"].size[-1]
                     * vec_regs(e["tile_x"].size[-1], 8) <= MAX_UNROLLED_REGS)
    # NOTE: the library's tile_x is [no, nb, bn]; this space keeps the two-way [no, bn] of
    # one column block per tile (nb = 1).
    no, bn = cfg["tile_x"].size
    return _run_body(cfg, _dense_mod._dense, M, N, K,
                     entities={"tile_x": SplitEntity([no, 1, bn])})


def _conv_out(H: int, W: int, KH: int, KW: int, stride: Any, padding: Any) -> tuple[int, int]:  # noqa: N803
    sh, sw = stride_pair(stride)
    pt, pl, pb, pr = pad_tuple(padding)
    return (_conv_mod.out_size(H, KH, pt, pb, sh), _conv_mod.out_size(W, KW, pl, pr, sw))


@autotvm.template("sample_efficiency/conv2d_wide")
def conv2d_wide(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: Any,  # noqa: N803
                padding: Any) -> Any:
    """NCHW conv2d with the library's NCHWc-packed kernel over a wide space."""
    cfg = autotvm.get_config()
    oh, ow = _conv_out(H, W, KH, KW, stride, padding)
    cfg.define_split("tile_oc", CO, num_outputs=2)
    cfg.define_split("tile_oh", oh, num_outputs=2)
    cfg.define_split("tile_ow", ow, num_outputs=2)
    cfg.define_split("tile_ic", CI, num_outputs=2)
    cfg.define_knob("unroll_kw", [True, False])
    cfg.define_knob("reorder_r", list(range(len(REDUCE_ORDERS))))
    # NOTE: unrolled block = oh_bn x ow_bn accumulators of ceil(bn / 8) vectors (x KW when
    # the kernel-width loop is unrolled).
    cfg.multi_filter(lambda e: e["tile_oh"].size[-1] * e["tile_ow"].size[-1]
                     * vec_regs(e["tile_oc"].size[-1], 8) * (KW if e["unroll_kw"].val else 1)
                     <= MAX_UNROLLED_REGS)
    s, args = _run_body(cfg, _conv_mod._conv2d_nchw, N, H, W, CO, CI, KH, KW, stride, padding)
    order = REDUCE_ORDERS[cfg["reorder_r"].val]
    if order != REDUCE_ORDERS[0]:
        _reorder_reductions(s, order)
    return s, args


def _reorder_reductions(s: Any, order: tuple[int, ...]) -> None:
    """Permute the accumulator stage's four reduction loops in place (the spatial register
    block stays innermost, as the library body leaves it)."""
    stage = next(st for st in s.stages if st.op.name.endswith(".global")
                 and len(getattr(st.op, "reduce_axis", ())) == 4)
    red = list(stage.op.reduce_axis)
    leaves = list(stage.leaf_iter_vars)
    pos = sorted(leaves.index(r) for r in red)
    new = list(leaves)
    for p, k in zip(pos, order):
        new[p] = red[k]
    stage.reorder(*new)
