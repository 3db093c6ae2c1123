"""The ``templtune`` command line; see :mod:`templtune.cli.main`."""
