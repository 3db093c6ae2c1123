"""x86 AutoTVM templates, registered on import (each also as ``<name>.x86``): every public
module of this folder (``conv2d_nchw``, ``dense``, ...) is imported, so a new template is a
new file."""

import sys

from templtune.templates import import_family

import_family(sys.modules[__name__])
