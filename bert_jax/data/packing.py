"""Packing several short examples into one fixed-length row.

Greedy and sequential: examples are taken in stream order, and a row is
closed when the next example does not fit (tokens, masked-LM slots or
examples per row). Because it only looks at the stream, packing restarted
from any example gives the same rows, which exact resume relies on.
"""
from typing import Dict, List

import numpy as np


def row_fits(used_tokens: int, used_predictions: int, used_examples: int, length: int,
             predictions: int, max_seq_length: int, max_predictions: int,
             max_examples: int) -> bool:
    return (used_examples < max_examples and used_tokens + length <= max_seq_length and
            used_predictions + predictions <= max_predictions)


def pack_rows(examples: Dict[str, np.ndarray], rows: List[List[int]], max_seq_length: int,
              max_predictions: int, max_examples: int) -> Dict[str, np.ndarray]:
    """Builds packed rows; `rows[r]` lists the indices of the examples in row r.

    `examples` holds unpacked rows: input_ids, segment_ids, input_mask [N, L];
    masked_lm_positions, masked_lm_ids, masked_lm_weights [N, P];
    next_sentence_labels [N].

    Returns (R = len(rows), L = max_seq_length, P = max_predictions,
    K = max_examples): input_ids, input_mask, segment_ids, position_ids,
    example_ids int32 [R, L] (example_ids 1..k, 0 on padding);
    masked_lm_positions, masked_lm_ids int32 [R, P]; masked_lm_weights float32
    [R, P]; next_sentence_labels, next_sentence_positions int32 [R, K] (the
    position of each example's [CLS]); next_sentence_weights float32 [R, K] (these
    three only when `examples` has next_sentence_labels).
    """
    num_rows = len(rows)
    lengths = examples["input_mask"].sum(1)
    real_slots = (examples["masked_lm_weights"] > 0).sum(1)
    out = {name: np.zeros((num_rows, max_seq_length), np.int32)
           for name in ("input_ids", "input_mask", "segment_ids", "position_ids", "example_ids")}
    for name in ("masked_lm_positions", "masked_lm_ids"):
        out[name] = np.zeros((num_rows, max_predictions), np.int32)
    out["masked_lm_weights"] = np.zeros((num_rows, max_predictions), np.float32)
    nsp = "next_sentence_labels" in examples
    if nsp:
        for name in ("next_sentence_labels", "next_sentence_positions"):
            out[name] = np.zeros((num_rows, max_examples), np.int32)
        out["next_sentence_weights"] = np.zeros((num_rows, max_examples), np.float32)
    sizes = np.array([len(members) for members in rows], np.int64)
    if not sizes.sum():
        return out
    # Each packed example: its index, its row, its place k in the row, its first token.
    index = np.fromiter((i for members in rows for i in members), np.int64, sizes.sum())
    row = np.repeat(np.arange(num_rows), sizes)
    first = np.cumsum(sizes) - sizes  # where each row's examples start in `index`
    k = np.arange(len(index)) - np.repeat(first, sizes)
    n, count = lengths[index], real_slots[index]
    offset = _starts_in_row(n, first, sizes)

    # A row's tokens are its examples' real tokens one after another, then padding: the
    # examples' tokens in order fill the rows' first places in order (boolean masks,
    # which numpy copies far faster than index arrays).
    source = np.arange(examples["input_ids"].shape[1])[None] < n[:, None]
    target = np.arange(max_seq_length)[None] < np.bincount(row, n, num_rows)[:, None]
    for name in ("input_ids", "segment_ids"):
        out[name][target] = examples[name][index][source]
    out["input_mask"][target] = 1
    out["position_ids"][target] = np.broadcast_to(np.arange(source.shape[1]), source.shape)[source]
    out["example_ids"][target] = np.repeat(k + 1, n)

    source = np.arange(examples["masked_lm_ids"].shape[1])[None] < count[:, None]
    target = np.arange(max_predictions)[None] < np.bincount(row, count, num_rows)[:, None]
    out["masked_lm_positions"][target] = (examples["masked_lm_positions"][index]
                                          + offset[:, None])[source]
    out["masked_lm_ids"][target] = examples["masked_lm_ids"][index][source]
    out["masked_lm_weights"][target] = 1.0
    if nsp:
        out["next_sentence_labels"][row, k] = examples["next_sentence_labels"][index]
        out["next_sentence_positions"][row, k] = offset
        out["next_sentence_weights"][row, k] = 1.0
    return out


def _starts_in_row(sizes: np.ndarray, first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Where each packed example starts within its row.

    The sum of the sizes of the examples before it in that row (`first`/`counts`: each row's span of
    examples)."""
    before = np.cumsum(sizes) - sizes
    return before - np.repeat(before[np.minimum(first, len(sizes) - 1)], counts)
