"""BERT's masked-LM masking, vectorised over a batch and stateless.

Used twice: by create-data for static masks and by the input pipeline for
dynamic masks, so both follow exactly the same rules:

- num_to_predict = min(max_predictions, max(1, round(len(tokens) * prob)))
  where len(tokens) counts [CLS] and [SEP], as in BERT;
- [CLS], [SEP] and padding are never candidates;
- with whole-word masking a word (a start token and its continuation pieces)
  is masked entirely or not at all: words are taken in random order and a
  word that would overshoot num_to_predict is skipped, as in BERT;
- each masked token becomes [MASK] with p=0.8, stays with p=0.1, becomes a
  uniformly random vocabulary id with p=0.1; with whole-word masking the draw
  is made once per word (BERT draws per token), so a word is never half
  [MASK] and half visible, which would give the hidden part away (a Chinese
  word of two characters, half shown, is nearly always guessable);
- positions are sorted and padded to max_predictions with weight 0.

All randomness comes from a 64-bit key per row (`example_keys`), hashed with
the token position (splitmix64), so a row's masks depend only on its key:
the same example gets the same masks whatever the batch it lands in.
"""
from typing import Dict, Optional

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def example_keys(seed: int, *ids) -> np.ndarray:
    """uint64 [B] keys from a seed and integer id arrays (e.g. epoch, file, record)."""
    with np.errstate(over="ignore"):
        key = _mix(np.asarray([seed], np.uint64) + _GOLDEN)
        for part in ids:
            key = _mix(key ^ (np.asarray(part).astype(np.uint64) * _GOLDEN + _GOLDEN))
    return key


def _stream(stream: int, length: int) -> np.ndarray:
    """uint64 [length]: the per-position half of a stream's bits (`_random_bits`)."""
    counters = np.arange(length, dtype=np.uint64) + np.uint64(stream * 1_000_003 + 1)
    with np.errstate(over="ignore"):
        return _mix(counters * _GOLDEN)


def _random_bits(keys: np.ndarray, stream: int, length: int) -> np.ndarray:
    """uint64 [B, length] random bits for one named stream."""
    with np.errstate(over="ignore"):
        return _mix(keys[:, None] ^ _stream(stream, length)[None, :])


def _bits_at(keys: np.ndarray, stream: int, length: int, rows: np.ndarray,
             positions: np.ndarray) -> np.ndarray:
    """`_random_bits(keys, stream, length)[rows, positions]`, computed there only."""
    with np.errstate(over="ignore"):
        return _mix(keys[rows] ^ _stream(stream, length)[positions])


def _uniform(keys: np.ndarray, stream: int, length: int) -> np.ndarray:
    return (_random_bits(keys, stream, length) >> np.uint64(11)) * (1.0 / (1 << 53))


def mask_batch(input_ids: np.ndarray, input_mask: np.ndarray, keys: np.ndarray, *,
               vocab_size: int, mask_id: int, cls_id: int, sep_id: int,
               max_predictions: int, masked_lm_prob: float = 0.15,
               word_start: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """Masks a batch of unmasked rows.

    Args:
      input_ids: int [B, L] token ids; input_mask: [B, L] 1 on real tokens.
      keys: uint64 [B] per-row random keys (see `example_keys`).
      word_start: bool [B, L], True where a token starts a word; None masks
        tokens independently (no whole-word masking).

    Returns:
      input_ids int32 [B, L] with masks applied; masked_lm_positions,
      masked_lm_ids int32 [B, P]; masked_lm_weights float32 [B, P], P =
      max_predictions.
    """
    input_ids = np.asarray(input_ids)
    batch, length = input_ids.shape
    valid = np.asarray(input_mask).astype(bool)
    candidate = valid & (input_ids != cls_id) & (input_ids != sep_id)
    num_to_predict = np.minimum(
        max_predictions, np.maximum(1, np.round(valid.sum(1) * masked_lm_prob))).astype(np.int64)
    if word_start is None:
        masked, word_of = _chosen_tokens(candidate, keys, num_to_predict), None
    else:
        masked, word_of = _chosen_words(candidate, np.asarray(word_start, bool), keys,
                                        num_to_predict)

    # The 80/10/10 draws, at the masked positions only (one per word: at its start).
    r, c = np.nonzero(masked)
    at = c if word_of is None else word_of[r, c]
    action = (_bits_at(keys, 1, length, r, at) >> np.uint64(11)) * (1.0 / (1 << 53))
    random_ids = (_bits_at(keys, 2, length, r, c) % np.uint64(vocab_size)).astype(np.int64)
    new_ids = input_ids.astype(np.int32)  # a copy
    new_ids[r, c] = np.where(action < 0.8, mask_id,
                             np.where(action >= 0.9, random_ids, input_ids[r, c]))

    # The masked positions in order, then padding of weight 0. np.nonzero lists each row's
    # positions in order, one row after another: a position's slot is its place in its row.
    per_row = np.bincount(r, minlength=batch)
    slot = np.arange(len(r)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    keep = slot < max_predictions
    lm_positions = np.zeros((batch, max_predictions), np.int32)
    lm_ids = np.zeros((batch, max_predictions), np.int32)
    lm_positions[r[keep], slot[keep]] = c[keep]
    lm_ids[r[keep], slot[keep]] = input_ids[r[keep], c[keep]]
    count = np.minimum(per_row, max_predictions)
    return {
        "input_ids": new_ids,
        "masked_lm_positions": lm_positions,
        "masked_lm_ids": lm_ids,
        "masked_lm_weights": (np.arange(max_predictions)[None] < count[:, None]).astype(
            np.float32),
    }


def _random_order(eligible: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """int [B, L]: the positions of each row, its eligible ones first in a random order.

    The eligible ones come in the order of their uniform draws (stream 0; ties by position), the
    others after. The 53 bits of each draw order as the uniform float they make."""
    bits = _random_bits(keys, 0, eligible.shape[1]) >> np.uint64(11)
    return np.argsort(np.where(eligible, bits, np.uint64(1 << 53)), axis=1, kind="stable")


def _chosen_tokens(candidate: np.ndarray, keys: np.ndarray,
                   num_to_predict: np.ndarray) -> np.ndarray:
    """bool [B, L]: each row's num_to_predict candidates first in its random order.

    Those at or below the row's num_to_predict-th smallest draw. A value sort finds that draw
    (several times faster than ranking every position); a row where two draws tie there, which
    53-bit draws all but never do, is ranked in full (ties by position)."""
    batch, length = candidate.shape
    draws = (_random_bits(keys, 0, length) >> np.uint64(11)).astype(np.float64)  # exact
    draws = np.where(candidate, draws, float(1 << 53))
    last = np.minimum(num_to_predict, length) - 1
    threshold = np.sort(draws, axis=1)[np.arange(batch), last]
    chosen = candidate & (draws <= threshold[:, None])
    tied = np.flatnonzero(chosen.sum(1) > num_to_predict)
    if tied.size:
        order = _random_order(candidate[tied], keys[tied])
        rank = np.empty_like(order)
        rank[np.arange(tied.size)[:, None], order] = np.arange(length)
        chosen[tied] = candidate[tied] & (rank < num_to_predict[tied, None])
    return chosen


def _chosen_words(candidate: np.ndarray, word_start: np.ndarray, keys: np.ndarray,
                  num_to_predict: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bool [B, L] masked tokens, int [B, L] the start of each token's word).

    Whole words in the row's random order, a word that would overshoot num_to_predict skipped."""
    batch, length = candidate.shape
    rows = np.arange(batch)[:, None]
    positions = np.broadcast_to(np.arange(length), (batch, length))
    previous_candidate = np.pad(candidate[:, :-1], ((0, 0), (1, 0)))
    starts = candidate & (word_start | ~previous_candidate)
    # Each candidate token belongs to the word starting at the last start before it.
    word_of = np.maximum.accumulate(np.where(starts, positions, 0), axis=1)
    flat = (rows * length + word_of)[candidate]
    word_length = np.bincount(flat, minlength=batch * length).reshape(batch, length)
    order = _random_order(starts, keys)
    lengths_in_order = np.take_along_axis(np.where(starts, word_length, 0), order, axis=1)
    chosen_in_order = np.zeros((batch, length), bool)
    total = np.zeros(batch, np.int64)
    # The shortest word at each rank or after: once no row has room for it, none fits.
    shortest = np.minimum.accumulate(np.where(lengths_in_order > 0, lengths_in_order,
                                              length + 1)[:, ::-1], axis=1)[:, ::-1]
    for rank in range(int(starts.sum(1).max(initial=0))):
        if (num_to_predict - total < shortest[:, rank]).all():
            break
        size = lengths_in_order[:, rank]
        fits = (size > 0) & (total + size <= num_to_predict)
        total += np.where(fits, size, 0)
        chosen_in_order[:, rank] = fits
    chosen_word = np.zeros((batch, length), bool)
    chosen_word[rows, order] = chosen_in_order
    return candidate & chosen_word[rows, word_of], word_of


def knowledge_rows(keys: np.ndarray, prob: float) -> np.ndarray:
    """bool [B]: the rows that ERNIE's knowledge masking masks by units.

    Units are entities or phrases rather than words; the rows are drawn with probability `prob` from
    the rows' keys."""
    return _uniform(keys, 3, 1)[:, 0] < prob


def unmask(input_ids: np.ndarray, masked_lm_positions: np.ndarray, masked_lm_ids: np.ndarray,
           masked_lm_weights: np.ndarray) -> np.ndarray:
    """Restores the original tokens of statically masked rows: int32 [B, L]."""
    restored = np.array(input_ids, np.int32)
    rows, slots = np.nonzero(np.asarray(masked_lm_weights) > 0)
    restored[rows, masked_lm_positions[rows, slots]] = masked_lm_ids[rows, slots]
    return restored
