"""BERT's masking (`data.masking.mask_batch`): the masks a key gives are fixed (a change
of implementation must give the same batches for the same seed: these digests were taken
from the implementation that made every earlier run's data), and they follow the rules."""
import hashlib

import numpy as np
import pytest

from bert_jax.data import masking

# (batch, length, whole-word, masked_lm_prob, max_predictions)
CASES = [(64, 128, False, 0.15, 20), (64, 128, True, 0.15, 20), (32, 512, False, 0.15, 80),
         (32, 64, True, 0.3, 20), (16, 32, False, 0.5, 40), (8, 16, True, 0.15, 2)]


def batches():
    """Rows of varied lengths with [CLS], two [SEP] and random word starts."""
    rng = np.random.default_rng(7)
    for batch, length, wwm, prob, max_predictions in CASES:
        lengths = rng.integers(3, length + 1, batch)
        mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
        ids = rng.integers(5, 1000, (batch, length)) * mask
        ids[:, 0] = 2
        ids[np.arange(batch), lengths - 1] = 3
        ids[np.arange(batch), lengths // 2] = 3
        starts = rng.random((batch, length)) < 0.6 if wwm else None
        keys = masking.example_keys(11, np.arange(batch), length)
        yield ids, mask, keys, starts, prob, max_predictions


def masked(ids, mask, keys, starts, prob, max_predictions):
    return masking.mask_batch(ids, mask, keys, vocab_size=1000, mask_id=4, cls_id=2,
                              sep_id=3, max_predictions=max_predictions, masked_lm_prob=prob,
                              word_start=starts)


def test_the_masks_of_a_key_are_those_every_earlier_run_had():
    digest = hashlib.sha256()
    for case in batches():
        out = masked(*case)
        for key in sorted(out):
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(out[key]).tobytes())
    assert digest.hexdigest() == \
        "a06a09840d98cf44e4924bb283f42c4a9cf32a7b42ec7ad3f5a9972531da6b23"


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_masks_follow_berts_rules(case):
    ids, mask, keys, starts, prob, max_predictions = list(batches())[case]
    out = masked(ids, mask, keys, starts, prob, max_predictions)
    weights = out["masked_lm_weights"] > 0
    want = np.minimum(max_predictions, np.maximum(1, np.round(mask.sum(1) * prob)))
    assert (weights.sum(1) <= want).all()
    positions = out["masked_lm_positions"]
    rows = np.arange(len(ids))[:, None]
    assert (ids[rows, positions][weights] == out["masked_lm_ids"][weights]).all()
    assert not np.isin(ids[rows, positions][weights], [2, 3]).any()  # never [CLS]/[SEP]
    padded = np.where(weights, positions, 10**6 + np.arange(positions.shape[1]))
    assert (np.diff(padded, axis=1) > 0).all()  # sorted and unique, the padding after
    changed = out["input_ids"] != ids
    hit = np.zeros_like(changed)
    hit[rows.repeat(positions.shape[1], 1)[weights], positions[weights]] = True
    assert not (changed & ~hit).any()  # only masked positions change


def test_tied_draws_are_ranked_by_position(monkeypatch):
    """The value-sort shortcut of `_chosen_tokens` must pick what ranking every draw
    (ties by position) picks, also when draws tie at the row's threshold."""
    coarse = masking._random_bits
    monkeypatch.setattr(masking, "_random_bits",  # 4 distinct draws: ties everywhere
                        lambda keys, stream, length: coarse(keys, stream, length)
                        >> np.uint64(62) << np.uint64(11))
    rng = np.random.default_rng(3)
    candidate = rng.random((64, 40)) < 0.7
    keys = masking.example_keys(5, np.arange(64))
    num_to_predict = rng.integers(1, 12, 64)
    order = masking._random_order(candidate, keys)
    rank = np.empty_like(order)
    rank[np.arange(64)[:, None], order] = np.arange(40)
    want = candidate & (rank < num_to_predict[:, None])
    np.testing.assert_array_equal(masking._chosen_tokens(candidate, keys, num_to_predict), want)
