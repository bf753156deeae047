"""The one thing pyproject.toml cannot say: ship the repository's ``scenarios/`` folder
(their single source) inside the package as ``simbatch/scenarios``, so that bundled
scenario names resolve after a non-editable install (``simbatch.files.bundled``)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["simbatch*"]), "simbatch.scenarios"],
    package_dir={"simbatch.scenarios": "scenarios"},
)
