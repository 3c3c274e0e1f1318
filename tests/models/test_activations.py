"""BERT's exact GELU (bert_jax/models/activations.py) against the float64 formula, and what its
gradient keeps from the forward pass."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.models.activations import activation, exact_gelu

ERF = np.vectorize(math.erf)


def reference(x):
    """GELU and its derivative in float64."""
    x = np.asarray(x, np.float64)
    cdf = 0.5 * (1 + ERF(x / math.sqrt(2)))
    return x * cdf, cdf + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def value_and_slope(fn, x):
    y, pull = jax.vjp(fn, x)
    return y, pull(jnp.ones_like(y))[0]


def rel(got, want):
    got = np.asarray(got, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_exact_gelu_and_its_gradient_follow_the_formula():
    x = jax.random.normal(jax.random.key(0), (4096,), jnp.float32) * 3
    want = reference(x)
    got = jax.jit(lambda x: value_and_slope(exact_gelu, x))(x)
    assert all(rel(g, w) < 1e-6 for g, w in zip(got, want))
    # The same function as jax's in float32.
    jax_gelu = value_and_slope(lambda x: nn.gelu(x, approximate=False), x)
    assert all(rel(g, np.asarray(j, np.float64)) < 1e-6 for g, j in zip(got, jax_gelu))
    assert activation("gelu") is exact_gelu


def test_in_bfloat16_it_is_as_close_as_bfloat16_allows():
    x = (jax.random.normal(jax.random.key(1), (4096,), jnp.float32) * 3).astype(jnp.bfloat16)
    want = reference(np.asarray(x, np.float32))
    got = jax.jit(lambda x: value_and_slope(exact_gelu, x))(x)
    assert [a.dtype for a in got] == [jnp.bfloat16] * 2
    # Computed in float32 and rounded once: within bf16's half ulp (2^-9) of the truth.
    assert all(rel(g, w) < 2 ** -9 for g, w in zip(got, want))


def test_the_gradient_keeps_only_the_input():
    x = jnp.linspace(-4, 4, 3 * 512, dtype=jnp.bfloat16).reshape(3, 512)

    def kept(fn):
        return [leaf for leaf in jax.tree.leaves(jax.vjp(fn, x)[1])
                if getattr(leaf, "shape", ()) == x.shape]

    assert len(kept(exact_gelu)) == 1 and (kept(exact_gelu)[0] == x).all()
    # jax's keeps three: 0.5x, erfc and exp (the reason for exact_gelu).
    assert len(kept(lambda x: nn.gelu(x, approximate=False))) > 1
