"""The epoch permutation (`shuffle.permuted`): a bijection of 0 .. size-1 for every size and key,
the same values for a position however the positions are grouped, another order for another
key, and no trace of the input order (no more fixed points or neighbours kept than chance)."""

from __future__ import annotations

import numpy as np
import pytest

from bert_jax.data import shuffle


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 65, 1000, 4097])
@pytest.mark.parametrize("key", [0, 1, 2**63 + 5])
def test_every_size_and_key_gives_a_permutation(size, key):
    order = shuffle.permuted(np.arange(size), size, key)
    assert order.dtype == np.int64
    assert sorted(order.tolist()) == list(range(size))


def test_positions_give_the_same_values_alone_or_together():
    size, key = 10_007, 42
    whole = shuffle.permuted(np.arange(size), size, key)
    some = np.array([5, 0, 10_006, 5, 777])
    assert shuffle.permuted(some, size, key).tolist() == whole[some].tolist()
    assert np.concatenate([shuffle.permuted(np.arange(a, min(a + 256, size)), size, key)
                           for a in range(0, size, 256)]).tolist() == whole.tolist()


def test_orders_look_random_and_differ_between_keys():
    size = 100_000
    a = shuffle.permuted(np.arange(size), size, 1)
    b = shuffle.permuted(np.arange(size), size, 2)
    assert np.mean(a == b) < 0.001
    assert np.sum(a == np.arange(size)) < 20  # about 1 fixed point expected
    assert np.mean(np.abs(np.diff(a)) == 1) < 0.001  # neighbours stay neighbours by chance only
    assert abs(np.corrcoef(np.arange(size), a)[0, 1]) < 0.02
    # every part of the data reaches the start: the first 1000 positions hold records from
    # each tenth of the records
    assert (np.bincount(a[:1000] * 10 // size, minlength=10) > 60).all()


def test_a_position_outside_the_epoch_is_refused():
    with pytest.raises(IndexError):
        shuffle.permuted(np.array([10]), 10, 0)
