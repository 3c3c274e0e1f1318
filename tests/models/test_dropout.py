"""bert_jax.models.dropout: the rate and the expectation are right, the four 16-bit draws of one
hash are independent, and the masks do not depend on how the activations are sharded."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from bert_jax.models.dropout import Dropout, keep_mask
from bert_jax.train import sharding

SHAPE = (16, 128, 384)  # 786,432 draws: the kept fraction has a standard error of 3.4e-4

KEYS = {"threefry": jax.random.key(0), "rbg": jax.random.key(0, impl="rbg")}


@pytest.mark.parametrize("rate", [0.1, 0.5])
@pytest.mark.parametrize("impl", ["threefry", "rbg"])
@pytest.mark.parametrize("shape", [SHAPE, (16, 128, 383)], ids=["four-per-hash", "one-each"])
def test_keeps_one_minus_rate(rate, impl, shape):
    keep, keep_prob = keep_mask(KEYS[impl], shape, rate)
    assert keep.shape == shape and keep.dtype == jnp.bool_
    assert abs(keep_prob - (1 - rate)) < 1e-5
    assert abs(float(keep.mean()) - keep_prob) < 2e-3


def test_four_draws_of_a_hash_are_independent():
    keep, p = keep_mask(KEYS["threefry"], SHAPE, 0.5)
    lanes = np.asarray(keep).reshape(-1, 4)
    for a in range(4):
        for b in range(a + 1, 4):  # P(both kept) = p^2 for independent lanes
            assert abs(np.mean(lanes[:, a] & lanes[:, b]) - p * p) < 3e-3, (a, b)
    # Neighbouring hashes differ too: no repetition along any axis.
    assert 0.2 < np.mean(lanes[1:] == lanes[:-1]) < 0.8


def test_same_key_same_mask_other_key_other_mask():
    first, _ = keep_mask(jax.random.key(1), SHAPE, 0.1)
    again, _ = keep_mask(jax.random.key(1), SHAPE, 0.1)
    other, _ = keep_mask(jax.random.key(2), SHAPE, 0.1)
    np.testing.assert_array_equal(first, again)
    assert 0.1 < np.mean(np.asarray(first) != np.asarray(other)) < 0.25


def test_scales_kept_values_and_keeps_the_mean():
    x = jnp.ones(SHAPE)
    out = Dropout(0.1).apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(3)})
    values = np.unique(np.asarray(out))
    np.testing.assert_allclose(values, [0.0, 1 / (1 - round(0.1 * 2 ** 16) / 2 ** 16)])
    assert abs(float(out.mean()) - 1.0) < 3e-3
    np.testing.assert_array_equal(Dropout(0.1).apply({}, x, deterministic=True), x)
    np.testing.assert_array_equal(
        Dropout(0.0).apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(3)}), x)


@pytest.mark.parametrize("spec", [PartitionSpec("data"), PartitionSpec(None, None, "tensor"),
                                  PartitionSpec("data", "tensor", None)])
def test_masks_do_not_depend_on_the_sharding(spec):
    shape = (8, 16, 64)
    want, _ = keep_mask(jax.random.key(4), shape, 0.1)
    mesh = sharding.make_mesh({"data": 2, "tensor": 4})
    out = NamedSharding(mesh, spec)
    got = jax.jit(lambda key: keep_mask(key, shape, 0.1)[0], out_shardings=out)(
        jax.random.key(4))
    assert got.sharding == out
    np.testing.assert_array_equal(got, want)
