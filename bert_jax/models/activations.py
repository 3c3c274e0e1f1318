"""The feed-forward activations by their configuration name (`BertConfig.hidden_act`).

BERT's exact GELU is `exact_gelu`, not `jax.nn.gelu(approximate=False)`: differentiating
jax's keeps three tensors the size of the feed-forward activation ([tokens, intermediate])
from the forward pass to the backward, 0.5x, erfc(-x/sqrt 2) and exp(-x^2/2), each written
once and read again, and in bf16 it evaluates erfc in bf16. `exact_gelu` keeps only its
input and recomputes the rest in the backward pass, in float32.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def _cdf(x32: jax.Array) -> jax.Array:
    """The standard normal CDF, Phi(x), in float32."""
    return 0.5 * (1.0 + jax.lax.erf(x32 * np.float32(1 / math.sqrt(2))))


@jax.custom_vjp
def exact_gelu(x: jax.Array) -> jax.Array:
    """x * Phi(x) (BERT's GELU), computed in float32 and returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    return (x32 * _cdf(x32)).astype(x.dtype)


def _exact_gelu_fwd(x):
    return exact_gelu(x), x


def _exact_gelu_bwd(x, g):
    # d/dx x Phi(x) = Phi(x) + x phi(x). The barrier makes XLA recompute Phi from x here
    # instead of reusing the forward's, which would keep a float32 copy alive in between.
    x32 = jax.lax.optimization_barrier(x).astype(jnp.float32)
    pdf = jnp.exp(-0.5 * x32 * x32) * np.float32(1 / math.sqrt(2 * math.pi))
    return ((g.astype(jnp.float32) * (_cdf(x32) + x32 * pdf)).astype(x.dtype),)


exact_gelu.defvjp(_exact_gelu_fwd, _exact_gelu_bwd)


def activation(name: str):
    return {
        "gelu": exact_gelu,  # BERT's exact erf GELU
        "gelu_new": functools.partial(nn.gelu, approximate=True),
        "gelu_pytorch_tanh": functools.partial(nn.gelu, approximate=True),
        "relu": nn.relu, "tanh": jnp.tanh, "silu": nn.silu, "swish": nn.silu,
    }[name]
