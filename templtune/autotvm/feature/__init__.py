"""Cost-model features of AutoTVM configs, computed from the lowered loop IR.

``itervar`` (per loop variable), ``knob`` (the config's flattened knob values) and ``curve``
(per-buffer touch curves). See :mod:`.itervar`, :mod:`.curve` and :mod:`.extract`.
"""

from templtune.autotvm.feature.curve import curve_feature
from templtune.autotvm.feature.extract import (
    FEATURE_TYPES,
    FeatureExtractor,
    config_feature,
    knob_feature,
    pad_rows,
)
from templtune.autotvm.feature.itervar import (
    itervar_feature,
    itervar_feature_names,
    itervar_rows,
)
from templtune.autotvm.feature.loops import ANNOTATIONS, summarize


def get_itervar_feature_flatten(func, take_log: bool = True):  # noqa: ARG001
    """Flat itervar features of a lowered function (TVM-style name; values are always logged)."""
    return itervar_feature(summarize(func))


def get_buffer_curve_sample_flatten(func, sample_n: int = 30):
    """Flat curve features of a lowered function (TVM-style name)."""
    return curve_feature(summarize(func), sample_n)


__all__ = [
    "ANNOTATIONS", "FEATURE_TYPES", "FeatureExtractor", "config_feature", "curve_feature",
    "get_buffer_curve_sample_flatten", "get_itervar_feature_flatten", "itervar_feature",
    "itervar_feature_names", "itervar_rows", "knob_feature", "pad_rows", "summarize",
]
