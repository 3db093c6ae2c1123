"""TVM-compatible import path ``autotvm.task.space``: re-exports :mod:`templtune.autotvm.space`
and the knob classes."""

from templtune.autotvm.space import (  # noqa: F401
    AnnotateEntity,
    AnnotateSpace,
    Axis,
    ConfigEntity,
    ConfigSpace,
    OtherOptionEntity,
    OtherOptionSpace,
    ReorderEntity,
    ReorderSpace,
    SplitEntity,
    SplitSpace,
    VirtualAxis,
)
from templtune.autotvm.task.fallback import FallbackConfigEntity  # noqa: F401
from templtune.autotvm.task.knobs import ANNOTATE_TABLE, Entity, KnobSpace  # noqa: F401
