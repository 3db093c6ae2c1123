"""Network operators that live in a file of their own.

Each public module here calls :func:`templtune.graph.op.register_op` with the operator's shape
inference, te compute, numpy reference and builder; this package imports every one of them,
so a new operator is one new file. The builder of an ``nn.``-prefixed op is then
``relay.nn.<name>``.
"""

from __future__ import annotations

import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
