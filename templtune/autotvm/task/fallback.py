"""The config used when no tuned configuration exists: :class:`FallbackConfigEntity`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from templtune.autotvm.space import Axis, ConfigSpace
from templtune.autotvm.task.knobs import Entity, SplitEntity, SplitSpace, divisors


class FallbackConfigEntity(ConfigSpace):
    """A default configuration built on the fly while a template runs without a tuned config.

    Knobs are collected as in a :class:`ConfigSpace` (each reads as its first entity), but a knob
    that is already set is never rebuilt, so values chosen by :meth:`fallback_split`,
    :meth:`fallback_with_reference_log` or ``cfg[name] = entity`` survive when the template body
    runs again. ``is_fallback`` is True so templates can pick better defaults themselves.
    """

    is_fallback = True

    def _define(self, kind: str, name: str, axes: Any, policy: str, **kwargs: Any) -> list[Axis]:
        if name in self.space_map:
            space = self.space_map[name]
            return [Axis(space, i) for i in range(space.num_output)]
        return super()._define(kind, name, axes, policy, **kwargs)

    def __setitem__(self, name: str, entity: Entity) -> None:
        """Set knob ``name`` to ``entity`` directly."""
        self._entity_map[name] = entity

    def fallback_split(self, name: str, constraints: Sequence[int]) -> None:
        """Choose split sizes of knob ``name`` under per-position upper bounds.

        From the innermost position outwards, take the largest divisor of the remaining product
        that is ``<= constraints[i]`` (-1: unbounded). ``128`` with ``[-1, 8, 4]`` gives
        ``[4, 8, 4]``; ``49`` with ``[-1, 8, 4]`` gives ``[7, 7, 1]``.

        Raises
        ------
        RuntimeError
            If a bound is below 1, so no divisor fits.
        """
        space = self.space_map.get(name)
        if not isinstance(space, SplitSpace):
            raise KeyError(f"fallback_split: {name!r} is not a split knob of this config")
        if len(constraints) != space.num_output:
            raise ValueError(f"fallback_split: {name!r} has {space.num_output} outputs, "
                             f"got {len(constraints)} constraints")
        rem = space.product
        sizes = [0] * len(constraints)
        for i in reversed(range(len(constraints))):
            bound = math.inf if constraints[i] == -1 else constraints[i]
            fits = [d for d in divisors(rem) if d <= bound]
            if not fits:
                raise RuntimeError(f"fallback_split: no factor of {rem} is <= {constraints[i]} "
                                   f"(knob {name!r}, constraints {list(constraints)})")
            sizes[i] = fits[-1]
            rem //= sizes[i]
        self._entity_map[name] = SplitEntity(sizes)

    def fallback_with_reference_log(self, ref_log: Iterable[tuple[Any, Any]]) -> None:
        """Copy the configuration of the most similar record of a reference log.

        Similarity sums, over the split knobs, the fraction of this knob's divisors that also
        divide the reference's tile product (TVM compares after each knob's increment; kept).
        Split knobs are then re-fitted with :meth:`fallback_split` under the reference sizes and
        the other knobs are copied. Does nothing if the log is empty.

        NOTE: the reference product ignores a ``-1`` placeholder (``[-1, 4, 8]`` counts as 32);
        TVM would take the product with the -1 and fail on it.
        """
        split_names = [n for n, s in self.space_map.items() if isinstance(s, SplitSpace)]
        my_divs = {n: set(divisors(self.space_map[n].product)) for n in split_names}  # type: ignore[attr-defined]
        best_score, best_cfg = 0.0, None
        for inp, _res in ref_log:
            cfg = inp.config
            score = 0.0
            for n in split_names:
                if n not in cfg:
                    continue
                ref_prod = math.prod(abs(int(x)) for x in cfg[n].size if int(x) > 0)
                score += len(my_divs[n] & set(divisors(max(ref_prod, 1)))) / len(my_divs[n])
                if score > best_score:
                    best_score, best_cfg = score, cfg
        if best_cfg is None:
            return
        for n, space in self.space_map.items():
            if n not in best_cfg:
                continue
            if isinstance(space, SplitSpace):
                self.fallback_split(n, [-1] + [int(x) for x in best_cfg[n].size[1:]])
            else:
                self._entity_map[n] = best_cfg[n]

    def __repr__(self) -> str:
        items = ", ".join(f"({k!r}, {v!r})" for k, v in self._entity_map.items())
        return f"[{items}],{self.code_hash}"
