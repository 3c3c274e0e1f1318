"""Packaging beyond setup.cfg: `configs/` stays at the top of the repository, where users
read and copy it, and is installed as the package `bert_jax.configs` so that a plain
(non-editable) `pip install .` ships it."""

from setuptools import find_namespace_packages, setup

# Namespace packages, so that the data directories (bert_jax/resources/*) count as packages
# too: setuptools warns about data directories that are not.
setup(packages=find_namespace_packages(include=["bert_jax", "bert_jax.*"],
                                       exclude=["*.__pycache__"]) + ["bert_jax.configs"],
      package_dir={"bert_jax.configs": "configs"})
