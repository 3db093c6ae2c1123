"""Lowering: schedules to loop IR (``ir``), passes, verifier and printer.

As in TVM, ``templtune.lower(s, args)`` is also a function. Because ``templtune.lower`` is this
package, the package module itself is made callable and forwards to
:func:`templtune.lower.lower_api.lower`.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from templtune.lower.lower_api import lower

        return lower(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
