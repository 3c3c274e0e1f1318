"""The network: the encoder, its heads and configuration, attention, losses.

Pure Flax; imports nothing of bert_jax above it."""
