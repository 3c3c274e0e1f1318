"""The mesh's axis names and the default logical-axis rules.

Apart from `bert_jax.train.sharding` so that the config schema and files (`configs/*.py`) can name
them without importing jax: loading a config stays cheap.
"""

from __future__ import annotations

from typing import Any

# The device mesh's axes, in order: data parallelism, parameter sharding (FSDP), tensor
# parallelism. `mesh_shape` sizes them (train/run_config.py); the rules below name them.
MESH_AXES = ("data", "fsdp", "tensor")

# (logical axis, mesh axis or axes or None). A mesh axis is used at most once per
# array; axes not listed here are replicated.
DEFAULT_LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    # Parameters.
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    # ALBERT's embedding width E (128): small, and its [E, H] projection shards H.
    ("factor_embed", None),
    ("heads", "tensor"),
    ("mlp", "tensor"),
    ("kv", None),
    ("position", None),
    ("token_type", None),
    ("layers", None),
    ("classes", None),
    # Activations.
    # ("fsdp", "data"), not ("data", "fsdp"): with all three mesh axes > 1, XLA's CPU
    # partitioner (jax 0.10.2) computes wrong gradients for the latter order.
    ("activation_batch", ("fsdp", "data")),
    ("activation_length", None),
    ("activation_embed", None),
    ("activation_heads", "tensor"),
    ("activation_kv", None),
    ("activation_mlp", "tensor"),
    ("activation_vocab", "tensor"),
)
