"""``python -m templtune``: the ``templtune`` command line."""

import sys

from templtune.cli.main import main

sys.exit(main())
