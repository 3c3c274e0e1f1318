"""The encoder's building blocks.

Initializers, the norm, the projections (float8 or not), the feed-forward, and where a layer sits in
the stack. A family's choice of norm or feed-forward is made in the one function that builds it
(`layer_norm`, `feed_forward`).
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.dtypes import promote_dtype

from bert_jax.models.activations import activation
from bert_jax.models.config import BertConfig
from bert_jax.models.fp8 import fp8_dot_general

Array = jax.Array


def dense_init(config: BertConfig, axes: tuple[str, ...]):
    """BERT's initializer: normal with stddev `initializer_range`, truncated at 2 sigma."""
    return nn.with_logical_partitioning(
        nn.initializers.truncated_normal(config.initializer_range), axes)


def zeros_init(axes):
    return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)


def layer_norm(config: BertConfig, name: str, axis: str = "embed") -> nn.Module:
    """The encoder's norm: LayerNorm or RMSNorm.

    LayerNorm has a bias unless `norm_bias=False`; RMSNorm (`norm_type="rms_norm"`) a scale only.
    `axis`: the logical name of the normalised dimension ("factor_embed" for ALBERT's embedding
    width)."""
    # Statistics are computed in float32 whatever the compute dtype.
    scale_init = nn.with_logical_partitioning(nn.initializers.ones_init(), (axis,))
    if config.norm_type == "rms_norm":
        return nn.RMSNorm(epsilon=config.layer_norm_eps, dtype=config.dtype,
                          param_dtype=config.param_dtype, scale_init=scale_init, name=name)
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps, dtype=config.dtype, param_dtype=config.param_dtype,
        use_bias=config.norm_bias, scale_init=scale_init, bias_init=zeros_init((axis,)), name=name)


def matmul(config: BertConfig):
    """The encoder layers' dot_general.

    float8 with current scaling when `config.fp8` (bert_jax/models/fp8.py), else XLA's in the
    compute dtype."""
    return fp8_dot_general if config.fp8 else jax.lax.dot_general


class Projection(nn.Module):
    """`x @ kernel + bias` as an einsum over a kernel of named axes.

    The axes are e.g. [H, N, D] for the query heads. The parameters of flax's `nn.Einsum`
    ("kernel", "bias"), with the encoder's matmul (`matmul`). Not nn.DenseGeneral: that initialises
    a flat 2-D kernel and would apply the 3-axis logical constraint to it when traced under a
    mesh."""

    config: BertConfig
    einsum_str: str
    shape: tuple[int, ...]
    kernel_axes: tuple[str, ...]
    bias_axes: tuple[str, ...]

    @nn.compact
    def __call__(self, x):
        c = self.config
        kernel = self.param("kernel", dense_init(c, self.kernel_axes), self.shape,
                            c.param_dtype)
        x, kernel = promote_dtype(x, kernel, dtype=c.dtype)
        out = jnp.einsum(self.einsum_str, x, kernel, _dot_general=matmul(c))
        if not c.use_bias:
            return out
        bias_shape = self.shape[-len(self.bias_axes):]
        bias = self.param("bias", zeros_init(self.bias_axes), bias_shape, c.param_dtype)
        return out + bias.astype(c.dtype)


def feed_forward(config: BertConfig, x: Array) -> Array:
    """BERT's feed-forward act(x W_in) W_out, or GeGLU's (act(x W_in) * x W_gate) W_out.

    GeGLU's with `gated_mlp`. Called inside a layer's compact `__call__`: its dense layers
    (`intermediate`, `gate`, `output`) are that layer's parameters."""
    c = config
    dense = functools.partial(nn.Dense, dtype=c.dtype, param_dtype=c.param_dtype,
                              dot_general=matmul(c), use_bias=c.use_bias)
    up = functools.partial(dense, c.intermediate_size,
                           kernel_init=dense_init(c, ("embed", "mlp")),
                           bias_init=zeros_init(("mlp",)))
    mlp_axes = ("activation_batch", "activation_length", "activation_mlp")
    h = nn.with_logical_constraint(activation(c.hidden_act)(up(name="intermediate")(x)),
                                   mlp_axes)
    if c.gated_mlp:
        h = nn.with_logical_constraint(h * up(name="gate")(x), mlp_axes)
    return dense(c.hidden_size, kernel_init=dense_init(c, ("mlp", "embed")),
                 bias_init=zeros_init(("embed",)), name="output")(h)


def layer_kind(config: BertConfig, layer_index) -> tuple[Any, Any]:
    """(is_first, is_local) of layer `layer_index`.

    Python bools for an unrolled layer's static index, traced booleans for the index a scan passes
    in."""
    if isinstance(layer_index, int):
        return layer_index == 0, config.is_local_layer(layer_index)
    local = (layer_index % config.global_attn_every_n_layers != 0) & (config.local_attention > 0)
    return layer_index == 0, local


def pick(flag, when_true, when_false):
    """`when_true if flag else when_false` for a static flag, jnp.where for a traced one."""
    if isinstance(flag, bool):
        return when_true if flag else when_false
    return jnp.where(flag, when_true, when_false)
