"""Pretraining records read back and BERT's masking rules checked on them."""

import numpy as np

MAX_SEQ, MAX_PRED = 128, 20


def read_records(paths, max_seq_length=MAX_SEQ, max_predictions=MAX_PRED):
    """All examples of record shards (TFRecord or ArrayRecord) as numpy arrays [N, ...], in file
    order (masks default to zeros)."""
    from bert_jax.data import example_proto, record_sources
    records = record_sources.RecordFiles(list(paths))
    features = example_proto.pretraining_features(max_seq_length, max_predictions)
    return example_proto.parse_examples(records.__getitems__(range(len(records))), features)


def mask_statistics(rows, tok):
    """BERT's masking rules checked row by row; returns overall fractions."""
    n = rows["input_mask"].sum(1)
    weights = rows["masked_lm_weights"] > 0
    positions, targets = rows["masked_lm_positions"], rows["masked_lm_ids"]
    expected = np.minimum(MAX_PRED, np.maximum(1, np.round(n * 0.15)))
    at_positions = np.take_along_axis(rows["input_ids"], positions, 1)
    assert (positions[weights] < np.broadcast_to(n[:, None], positions.shape)[weights]).all()
    assert not np.isin(targets[weights], [tok.cls_id, tok.sep_id, tok.pad_id]).any()
    assert (np.diff(weights.astype(int), axis=1) <= 0).all(), "real slots first"
    assert (np.diff(positions, axis=1)[weights[:, 1:]] > 0).all(), "positions sorted"
    unconstrained = np.round(n * 0.15) <= MAX_PRED
    return {
        "per_row_counts": weights.sum(1), "expected_counts": expected,
        "masked_share": weights[unconstrained].sum() / (n[unconstrained] - 3).sum(),
        "as_mask": (at_positions[weights] == tok.mask_id).mean(),
        "unchanged": (at_positions[weights] == targets[weights]).mean(),
        "random": ((at_positions[weights] != tok.mask_id) &
                   (at_positions[weights] != targets[weights])).mean(),
    }


def assert_bert_masking(rows, tok):
    """BERT's masking rules, measured: the per-row count formula, 15% of the maskable
    tokens, 80% [MASK] / 10% unchanged / 10% random."""
    measured = mask_statistics(rows, tok)
    np.testing.assert_array_equal(measured["per_row_counts"], measured["expected_counts"])
    assert abs(measured["masked_share"] - 0.15) < 0.005
    assert abs(measured["as_mask"] - 0.8) < 0.015
    assert abs(measured["unchanged"] - 0.1) < 0.015
    assert abs(measured["random"] - 0.1) < 0.015


def assert_whole_words(rows, tok):
    starts = tok.word_start_table()
    for row in range(len(rows["input_ids"])):
        w = rows["masked_lm_weights"][row] > 0
        original = rows["input_ids"][row].copy()
        original[rows["masked_lm_positions"][row][w]] = rows["masked_lm_ids"][row][w]
        masked = np.zeros(MAX_SEQ, bool)
        masked[rows["masked_lm_positions"][row][w]] = True
        for i in range(1, int(rows["input_mask"][row].sum())):
            after_special = original[i - 1] in (tok.cls_id, tok.sep_id)
            if not starts[original[i]] and not after_special:  # a continuation piece
                assert masked[i] == masked[i - 1], (row, i)


