"""BERT in JAX/Flax."""

__version__ = "0.1.0"  # setup.cfg reads it; `bert-jax --version` prints it
