"""Packaging beyond setup.cfg: `configs/` stays at the top of the repository, where users
read and copy it, and is installed as the package `bert_jax.configs` so that a plain
(non-editable) `pip install .` ships it."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["bert_jax", "bert_jax.*"]) + ["bert_jax.configs"],
      package_dir={"bert_jax.configs": "configs"})
