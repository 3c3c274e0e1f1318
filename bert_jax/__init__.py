"""BERT in JAX/Flax."""
