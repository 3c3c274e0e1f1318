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
    for row, members in enumerate(rows):
        offset = slot = 0
        for k, index in enumerate(members):
            n, count = int(lengths[index]), int(real_slots[index])
            span, slots = slice(offset, offset + n), slice(slot, slot + count)
            out["input_ids"][row, span] = examples["input_ids"][index, :n]
            out["segment_ids"][row, span] = examples["segment_ids"][index, :n]
            out["input_mask"][row, span] = 1
            out["position_ids"][row, span] = np.arange(n)
            out["example_ids"][row, span] = k + 1
            out["masked_lm_positions"][row, slots] = (
                examples["masked_lm_positions"][index, :count] + offset)
            out["masked_lm_ids"][row, slots] = examples["masked_lm_ids"][index, :count]
            out["masked_lm_weights"][row, slots] = 1.0
            if nsp:
                out["next_sentence_labels"][row, k] = examples["next_sentence_labels"][index]
                out["next_sentence_positions"][row, k] = offset
                out["next_sentence_weights"][row, k] = 1.0
            offset += n
            slot += count
    return out
