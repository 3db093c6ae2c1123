"""The rewrite half of ``AlterOpLayout``: a network with its layout choices made becomes one
that runs blocked (``NCHW{b}c``) between the convolutions.

Each call is visited once, in order, and mapped to ``(new expression, block)`` (block 0:
plain NCHW). An op keeps its input's blocking where it has a blocked form:

* element-wise unary ops (``relu``, ``clip``, ``sigmoid``, ``nn.hard_swish`` ...);
* numpy-broadcasting binaries (``add``, ``multiply`` ...) whose operands keep the channel
  axis whole: full NCHW tensors, ``[N, C, 1, 1]`` ones (a squeeze-excitation scale) and
  per-channel constants, which are packed here, or single values;
* ``concatenate`` along the channels of inputs whose channel counts the block divides;
* ``nn.batch_norm`` (not folded into a convolution: DenseNet's pre-activations), as a
  multiply and an add of packed per-channel constants;
* depthwise convolutions, pooling, a residual ``add``, ``bias_add`` and a ``batch_flatten``
  of a 1x1 map; a depthwise convolution on a plain input takes the input block of the
  blocked convolution its value alone feeds (the transform moves before it).

Any other op gets plain inputs: a ``layout_transform`` is inserted once per value and layout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .ir import Call, Expr, Var
from .op import is_depthwise, make_call
from .ops.elemwise import BINARY, UNARY
from .ops.nchwc import (
    blocked,
    conv2d_nchwc,
    depthwise_conv2d_nchwc,
    layout_transform,
    pack_bias,
    pack_data,
    pack_depthwise_kernel,
    pack_group_kernel,
)

if TYPE_CHECKING:
    from .alter_layout import LayerChoice

__all__ = ["Rewriter", "is_blockable_depthwise"]

#: element-wise ops of one input: any blocking passes through them
ELEMENTWISE = frozenset(UNARY) | {"nn.relu", "clip"}
#: numpy-broadcasting binaries
BROADCAST = frozenset(BINARY) | {"add"}
#: the ops a blocking padded past the channels passes through: finite lanes stay finite (the
#: padded lanes start as zeros, and the weights that read them are zero; a log, a reciprocal
#: or a division could make them infinite, and zero times infinity is not zero)
FINITE = frozenset({"nn.relu", "clip", "sigmoid", "tanh", "abs", "negative", "nn.leaky_relu",
                    "nn.hard_sigmoid", "nn.hard_swish", "add", "subtract", "multiply",
                    "maximum", "minimum"})
_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d")


def is_blockable_depthwise(c: Call, params: Any) -> bool:
    """A float32 NCHW depthwise convolution with a bound weight (run blocked when its input
    is)."""
    return (c.op == "nn.conv2d" and c.dtype == "float32" and c.attr("data_layout") == "NCHW"
            and is_depthwise(c.attr("groups"), c.args[0].shape[1], c.shape[1])
            and isinstance(c.args[1], Var)
            and c.args[1].name in set(params or ()))


def _size(e: Expr) -> int:
    return int(np.prod(e.shape, dtype=np.int64))


def _as_nchw(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """A numpy-broadcast operand's shape against a 4-D tensor, as 4 dims (None: more)."""
    return None if len(shape) > 4 else (1,) * (4 - len(shape)) + tuple(shape)


class Rewriter:
    """Rewrites calls in order (:meth:`rewrite`) given each convolution's choice (by ``id``;
    None: plain); ``params`` gains the packed constants."""

    def __init__(self, params: dict[str, np.ndarray],
                 choices: dict[int, LayerChoice | None],
                 users: dict[int, list[Call]] | None = None, lanes: int = 0) -> None:
        self.params, self.choices = dict(params), choices
        self.users = users or {}
        #: float32 lanes of the target's vectors (0: unknown): a depthwise conv with no blocked
        #: neighbour runs at a block of one or two vectors where one divides its channels
        self.lanes = lanes
        self.new: dict[int, tuple[Expr, int]] = {}
        self.views: dict[tuple[int, int], Expr] = {}
        self.packed: dict[str, Var] = {}
        self.n_transforms = 0

    def value(self, e: Expr) -> tuple[Expr, int]:
        return self.new.get(id(e), (e, 0))

    def as_block(self, e: Expr, b: int) -> Expr:
        """``e`` in layout ``NCHW{b}c`` (``b`` 0: plain NCHW), transformed once per layout."""
        new, cur = self.value(e)
        if cur == b:
            return new
        key = (id(e), b)
        if key not in self.views:
            c = e.shape[1]
            pads = any(k and c % k for k in (cur, b))
            self.views[key] = layout_transform(new, blocked(cur), blocked(b),
                                               channels=c if pads else 0)
            self.n_transforms += 1
        return self.views[key]

    def _padded(self, e: Expr) -> bool:
        """Whether ``e``'s new value is blocked with lanes past its channels."""
        b = self.value(e)[1]
        return bool(b) and e.shape[1] % b != 0

    def param(self, name: str, value: np.ndarray) -> Var:
        """A new bound parameter (one variable per name, however often it is asked for)."""
        from .nn import var

        if name not in self.packed:
            self.params[name] = value
            self.packed[name] = var(name, value.shape, str(value.dtype))
        return self.packed[name]

    def _bound(self, e: Expr) -> np.ndarray | None:
        return self.params.get(e.name) if isinstance(e, Var) else None

    def rewrite(self, c: Call) -> tuple[Expr, int]:
        choice = self.choices.get(id(c))
        attrs = dict(c.attrs)
        if choice is not None:
            w = c.args[1]
            assert isinstance(w, Var)
            kname = f"{w.name}_OIHW{choice.ic_bn}i{choice.oc_bn}o"
            groups = int(attrs["groups"])
            kvar = self.param(kname, pack_group_kernel(self.params[w.name], groups,
                                                       choice.ic_bn, choice.oc_bn))
            data = self.as_block(c.args[0], choice.ic_bn)
            ci, co = c.args[0].shape[1], c.shape[1]
            pads = ci % choice.ic_bn or co % choice.oc_bn
            return conv2d_nchwc(data, kvar, attrs["strides"], attrs["padding"],
                                choice.config, groups, (ci, co) if pads else None), choice.oc_bn
        vals = [self.value(a) for a in c.args]
        b = vals[0][1] if vals else 0
        if c.op not in FINITE and any(self._padded(a) for a in c.args) and not (
                c.op in _POOLS or is_blockable_depthwise(c, self.params)
                or c.op in ("nn.bias_add", "nn.batch_norm")):
            return self._plain(c, attrs)  # no op that could make a padded lane infinite
        if is_blockable_depthwise(c, self.params):
            # NOTE: a depthwise conv keeps its input's blocking: no transform around it. On a
            # plain input it takes the blocking of the conv its output feeds: that transform
            # moves before it, and the blocked kernel runs several times faster than the
            # plain one (a stride-2 one's vectors along a row gather every other pixel).
            b = b or self._fed_block(c) or self._own_block(c)
        if b and is_blockable_depthwise(c, self.params):
            w = c.args[1]
            assert isinstance(w, Var)
            kvar = self.param(f"{w.name}_OIHW1i{b}o", pack_depthwise_kernel(self.params[w.name],
                                                                            b))
            return depthwise_conv2d_nchwc(self.as_block(c.args[0], b), kvar, attrs["strides"],
                                          attrs["padding"]), b
        if b and c.op in ELEMENTWISE:
            return make_call(c.op, [vals[0][0]], **attrs), b
        if (b and c.op == "nn.bias_add" and attrs["axis"] % 4 == 1
                and self._bound(c.args[1]) is not None):
            bias = c.args[1]
            assert isinstance(bias, Var)
            bvar = self.param(f"{bias.name}_{b}c", pack_bias(self.params[bias.name], b))
            return make_call("add", [vals[0][0], bvar]), b
        if c.op in BROADCAST and len(c.args) == 2:
            bb = self._broadcast_block(c, [v[1] for v in vals]) or self._viewed_block(c)
            if bb:
                return make_call(c.op, [self._operand(a, bb) for a in c.args]), bb
        if c.op == "concatenate":
            bb = self._concat_block(c, [v[1] for v in vals])
            if bb:
                return make_call("concatenate", [self.as_block(a, bb) for a in c.args],
                                 axis=1), bb
        if b and c.op == "nn.batch_norm" and self._batch_norm_blockable(c, attrs):
            return self._batch_norm(c, vals[0][0], attrs, b), b
        if b and c.op in _POOLS and attrs["layout"] == "NCHW":
            return make_call(c.op, [vals[0][0]], **{**attrs, "layout": blocked(b)}), b
        if (b and c.op == "nn.batch_flatten" and c.args[0].shape[2:] == (1, 1)
                and not self._padded(c.args[0])):
            # NOTE: a 1x1 map flattens to the same channel order in NCHW and NCHW[x]c
            return make_call(c.op, [vals[0][0]], **attrs), 0
        return self._plain(c, attrs)

    def _chain_end(self, c: Call, through: Callable[[Call], bool],
                   steps: int | None = None) -> tuple[Call, Call] | None:
        """Following ``c``'s value through its sole users while ``through`` holds (at most
        ``steps`` of them): ``(e, u)``, the last value and its sole user that ``through``
        stops; None where a value has no user or several, or the steps run out."""
        e, n = c, 0
        while True:
            users = self.users.get(id(e), [])
            if len(users) != 1:
                return None
            u = users[0]
            if not through(u):
                return e, u
            n += 1
            if steps is not None and n >= steps:
                return None
            e = u

    def _keeps_blocks(self, u: Call) -> bool:
        """An element-wise op, a bias or a per-channel constant: any blocking passes through."""
        return u.op in ELEMENTWISE or u.op == "nn.bias_add" or (
            u.op in BROADCAST and len(u.args) == 2
            and any(self._bound(a) is not None for a in u.args)
            and self._broadcast_block(u, [1, 1]) == 1)

    def _fed_block(self, c: Call) -> int:
        """The input block of the blocked convolution ``c``'s value alone feeds, through
        element-wise ops and per-channel constants that keep any blocking; 0 if none."""
        end = self._chain_end(c, self._keeps_blocks, 4)
        if end is None:
            return 0
        e, u = end
        choice = self.choices.get(id(u))
        return choice.ic_bn if choice is not None and u.args[0] is e else 0

    def _own_block(self, c: Call) -> int:
        """The block of a depthwise conv ``c`` with no blocked input or consumer whose value
        has one user (through element-wise ops and a bias): two vectors of lanes, else one,
        where it divides the channels; 0 otherwise.

        ConvNeXt's depthwise 7x7 convs sit between layer norms over channels-last values:
        blocked, with a transform on each side (the one after it fused into its output
        stage), they run the blocked kernel instead of the plain one, whose vectors along a
        row reload every tap. A value also used elsewhere stays plain: blocking it would add
        a transform back for each plain user."""
        if self._chain_end(c, lambda u: u.op in ELEMENTWISE or u.op == "nn.bias_add") is None:
            return 0
        ch = c.shape[1]
        return next((b for b in (2 * self.lanes, self.lanes) if b and ch % b == 0), 0)

    def _plain(self, c: Call, attrs: dict[str, Any]) -> tuple[Expr, int]:
        """``c`` on plain NCHW inputs."""
        args = [self.as_block(a, 0) for a in c.args]
        if all(n is a for n, a in zip(args, c.args)):
            return c, 0
        return make_call(c.op, args, **attrs), 0

    # ---- broadcasting binaries ----------------------------------------------------------------
    def _broadcast_block(self, c: Call, blocks: list[int]) -> int:
        """The block a broadcasting binary runs at: its first blocked operand's, where every
        operand keeps the channel axis whole or is a single value; 0 (plain) otherwise."""
        b = next((k for k in blocks if k), 0)
        if not b or len(c.shape) != 4:
            return 0
        for a in c.args:
            if _size(a) == 1:
                continue
            shape = _as_nchw(a.shape)
            if shape is None or shape[1] != c.shape[1] or any(
                    d not in (1, o) for d, o in zip(shape, c.shape)):
                return 0
            if len(a.shape) != 4 and self._bound(a) is None:
                return 0
        return b

    def _viewed_block(self, c: Call) -> int:
        """The block of a transform already made of one of plain binary ``c``'s operands,
        where a user of ``c`` takes its input at that block (a blockable depthwise conv, a
        convolution blocked so); 0 otherwise.

        ConvNeXt's first stage: its residual stream starts plain (a layer norm's value) and a
        transform feeds each block's depthwise conv; the residual add in the block's blocked
        view runs the whole stream blocked (the other operand's transform fuses into the
        dense kernel that writes it), and the next depthwise conv needs no transform."""
        operands = {id(a) for a in c.args}
        for b in sorted({b for i, b in self.views if b and i in operands}):
            if any(u.args and u.args[0] is c and self._takes_block(u, b)
                   for u in self.users.get(id(c), [])):
                return self._broadcast_block(c, [b, b])
        return 0

    def _takes_block(self, u: Call, b: int) -> bool:
        """Whether call ``u`` reads its data input at block ``b``."""
        choice = self.choices.get(id(u))
        return (choice.ic_bn == b) if choice is not None else is_blockable_depthwise(
            u, self.params)

    def _operand(self, a: Expr, b: int) -> Expr:
        """A broadcasting binary's operand at block ``b``: single values as they are, bound
        constants packed (once per block), other values transformed."""
        if _size(a) == 1:
            return self.value(a)[0]
        value = self._bound(a)
        if value is not None:
            assert isinstance(a, Var)
            shape = _as_nchw(a.shape)
            assert shape is not None
            return self.param(f"{a.name}_{b}c", pack_data(value.reshape(shape), b))
        return self.as_block(a, b)

    # ---- concatenate and batch norm -----------------------------------------------------------
    def _concat_block(self, c: Call, blocks: list[int]) -> int:
        """The block of a channel ``concatenate``: of its inputs' blocks, the most common
        that divides every input's channel count (0: none does, or none is blocked)."""
        if len(c.shape) != 4 or int(c.attr("axis")) % 4 != 1:
            return 0
        held = sorted({k for k in blocks if k}, key=lambda k: (-blocks.count(k), -k))
        return next((k for k in held if not any(a.shape[1] % k for a in c.args)), 0)

    def _batch_norm_blockable(self, c: Call, attrs: dict[str, Any]) -> bool:
        return (len(c.shape) == 4 and int(attrs["axis"]) % 4 == 1
                and all(self._bound(a) is not None for a in c.args[1:]))

    def _batch_norm(self, c: Call, data: Expr, attrs: dict[str, Any], b: int) -> Expr:
        """Inference batch norm as ``data * scale + shift``, both packed per channel."""
        gamma, beta, mean, var = (self._bound(a) for a in c.args[1:])
        assert gamma is not None and beta is not None and mean is not None and var is not None
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + attrs["epsilon"])
        shift = beta - mean * scale
        g = c.args[1]
        assert isinstance(g, Var)
        name = g.name
        svar = self.param(f"{name}_bn_scale_{b}c", pack_bias(scale.astype(np.float32), b))
        tvar = self.param(f"{name}_bn_shift_{b}c", pack_bias(shift.astype(np.float32), b))
        return make_call("add", [make_call("multiply", [data, svar]), tvar])
