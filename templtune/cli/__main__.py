"""``python -m templtune.cli``."""

import sys

from templtune.cli.main import main

sys.exit(main())
