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


def _random_bits(keys: np.ndarray, stream: int, length: int) -> np.ndarray:
    """uint64 [B, length] random bits for one named stream."""
    counters = np.arange(length, dtype=np.uint64) + np.uint64(stream * 1_000_003 + 1)
    with np.errstate(over="ignore"):
        return _mix(keys[:, None] ^ _mix(counters * _GOLDEN)[None, :])


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
    rows = np.arange(batch)[:, None]
    positions = np.broadcast_to(np.arange(length), (batch, length))
    valid = np.asarray(input_mask).astype(bool)
    candidate = valid & (input_ids != cls_id) & (input_ids != sep_id)
    num_to_predict = np.minimum(
        max_predictions, np.maximum(1, np.round(valid.sum(1) * masked_lm_prob))).astype(np.int64)

    previous_candidate = np.pad(candidate[:, :-1], ((0, 0), (1, 0)))
    if word_start is None:
        starts = candidate
    else:
        starts = candidate & (np.asarray(word_start, bool) | ~previous_candidate)
    # Each candidate token belongs to the word starting at the last start before it.
    word_of = np.maximum.accumulate(np.where(starts, positions, 0), axis=1)
    word_length = np.zeros((batch, length), np.int64)
    row_of = np.broadcast_to(rows, (batch, length))
    np.add.at(word_length, (row_of[candidate], word_of[candidate]), 1)

    order = np.argsort(np.where(starts, _uniform(keys, 0, length), 2.0), axis=1, kind="stable")
    lengths_in_order = np.take_along_axis(np.where(starts, word_length, 0), order, axis=1)
    if word_start is None:
        chosen_in_order = (positions < num_to_predict[:, None]) & (lengths_in_order > 0)
    else:
        chosen_in_order = np.zeros((batch, length), bool)
        total = np.zeros(batch, np.int64)
        for rank in range(int(starts.sum(1).max(initial=0))):
            size = lengths_in_order[:, rank]
            fits = (size > 0) & (total + size <= num_to_predict)
            total += np.where(fits, size, 0)
            chosen_in_order[:, rank] = fits
    chosen_word = np.zeros((batch, length), bool)
    chosen_word[rows, order] = chosen_in_order
    masked = candidate & chosen_word[rows, word_of]

    action = _uniform(keys, 1, length)
    if word_start is not None:  # one draw per word: the draw at its start position
        action = np.take_along_axis(action, word_of, axis=1)
    random_ids = (_random_bits(keys, 2, length) % np.uint64(vocab_size)).astype(np.int64)
    new_ids = np.where(masked & (action < 0.8), mask_id, input_ids)
    new_ids = np.where(masked & (action >= 0.9), random_ids, new_ids)

    sorted_positions = np.sort(np.where(masked, positions, length + positions), axis=1)
    if max_predictions > length:
        sorted_positions = np.pad(sorted_positions, ((0, 0), (0, max_predictions - length)),
                                  constant_values=2 * length)
    sorted_positions = sorted_positions[:, :max_predictions]
    weights = sorted_positions < length
    lm_positions = np.where(weights, sorted_positions, 0)
    lm_ids = np.where(weights, np.take_along_axis(input_ids, lm_positions, axis=1), 0)
    return {
        "input_ids": new_ids.astype(np.int32),
        "masked_lm_positions": lm_positions.astype(np.int32),
        "masked_lm_ids": lm_ids.astype(np.int32),
        "masked_lm_weights": weights.astype(np.float32),
    }


def knowledge_rows(keys: np.ndarray, prob: float) -> np.ndarray:
    """bool [B]: the rows that ERNIE's knowledge masking masks by units (entities or
    phrases) rather than words, drawn with probability `prob` from the rows' keys."""
    return _uniform(keys, 3, 1)[:, 0] < prob


def unmask(input_ids: np.ndarray, masked_lm_positions: np.ndarray, masked_lm_ids: np.ndarray,
           masked_lm_weights: np.ndarray) -> np.ndarray:
    """Restores the original tokens of statically masked rows: int32 [B, L]."""
    restored = np.array(input_ids, np.int32)
    rows, slots = np.nonzero(np.asarray(masked_lm_weights) > 0)
    restored[rows, masked_lm_positions[rows, slots]] = masked_lm_ids[rows, slots]
    return restored
