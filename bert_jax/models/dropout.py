"""Dropout whose masks take a quarter of the random hashes of flax's.

`nn.Dropout` draws a 32-bit uniform per element: one threefry hash each under jax's
partitionable threefry, most of the cost of dropout, which took an eighth of a MiniLM
fine-tuning step on CPU. One threefry hash gives 64 bits, so here each hash decides four
elements with 16 bits apiece. An element is dropped when its draw is below
round(rate * 2**16): the keep probability is 1 - that / 2**16 (0.900009 for rate 0.1),
and kept values are scaled by its exact inverse, so the expectation is unchanged.

An element's bits depend only on the key and its index (the counter is built from
iotas, as jax's partitionable threefry does), so the masks are the same whatever mesh
the activations are sharded over. Keys of other implementations (`rng_impl=rbg`), and
last dimensions that are not a multiple of four, take one `jax.random.bits` draw each.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.extend.random import threefry2x32_p

Array = jax.Array

_LEVELS = 1 << 16


def _counters(shape: tuple[int, ...]) -> tuple[Array, Array]:
    """Two uint32 words that are unique per element.

    Its index along the first axis and its flat index within the rest."""
    lead = jax.lax.broadcasted_iota(jnp.uint32, shape, 0)
    rest = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(1, len(shape))):
        rest = rest + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride)
        stride *= shape[axis]
    return lead, rest


def _four_per_hash(key: Array, shape: tuple[int, ...]) -> bool:
    return (jax.random.key_impl(key) == "threefry2x32" and len(shape) > 0
            and shape[-1] % 4 == 0 and math.prod(shape[1:]) < 2 ** 32)


def keep_mask(key: Array, shape: tuple[int, ...], rate: float) -> tuple[Array, float]:
    """A boolean mask of the elements kept and the probability of keeping one."""
    threshold = round(rate * _LEVELS)
    if _four_per_hash(key, shape):
        words_shape = (*shape[:-1], shape[-1] // 4)
        data = jax.random.key_data(key)
        high, low = threefry2x32_p.bind(data[0], data[1], *_counters(words_shape))
        draws = [high & 0xFFFF, high >> 16, low & 0xFFFF, low >> 16]
        keep = jnp.stack([d >= threshold for d in draws], axis=-1).reshape(shape)
    else:
        keep = jax.random.bits(key, shape, jnp.uint16) >= threshold
    return keep, 1.0 - threshold / _LEVELS


class Dropout(nn.Module):
    """Inverted dropout with keys from the "dropout" collection.

    Identity when `deterministic` or at rate 0."""

    rate: float

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        if deterministic or self.rate == 0.0:
            return x
        keep, keep_prob = keep_mask(self.make_rng("dropout"), x.shape, self.rate)
        return jnp.where(keep, x / jnp.asarray(keep_prob, x.dtype), jnp.zeros_like(x))
