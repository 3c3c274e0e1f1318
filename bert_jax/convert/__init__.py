"""Conversion between bert_jax parameters and published checkpoint formats."""
