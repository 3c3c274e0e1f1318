"""BERT in JAX/Flax."""

import os

__version__ = "0.2.0"  # setup.cfg reads it; `bert-jax --version` prints it
# The data shipped inside the package: the corpus, the vocabulary, the labelled e-mails.
RESOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resources")
