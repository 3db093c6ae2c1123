"""Packaging: the top-level ``templates/`` folder is installed as ``templtune.templates``."""

from setuptools import find_packages, setup

packages = find_packages(include=["templtune", "templtune.*"])
packages += ["templtune.templates"] + [
    "templtune.templates." + p for p in find_packages(where="templates")
]

setup(
    packages=packages,
    package_dir={"templtune": "templtune", "templtune.templates": "templates"},
    package_data={"templtune": ["py.typed"], "templtune.templates": ["logs/*/*.log"]},
)
