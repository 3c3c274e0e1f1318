"""Variable-length features -> fixed-shape numpy batches: padding, length bucketing and packing.

A *feature* is a dict with `input_ids` and `segment_ids` (lists, special tokens
included), optional per-token lists named in `sequence_keys` (e.g. tag labels) and
scalars (labels, span positions, `feature_index`). A multiple-choice feature holds C
sequences per key instead (lists of C lists) and batches to [B, C, L].

Three ways to batch them:
  padded     every row padded to `max_seq_length` (one compiled shape)
  bucketed   rows padded to the smallest bucket length that fits the longest in the
             batch; batches drawn from length-sorted chunks (a few compiled shapes)
  packed     several features share one row of `max_seq_length`; `example_ids` keeps
             their attention apart, `position_ids` restart at 0 for each, and scalar
             keys become [K] vectors with the row's [CLS] positions in `cls_positions`

Every batch carries `example_weights` (1 for a real feature, 0 for the filler that
completes the last batch), so losses and metrics ignore the filler.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

Feature = dict


def bucket_lengths(max_seq_length: int, smallest: int = 16) -> list[int]:
    """Powers of two from `smallest` up to `max_seq_length` (always included).

    16 keeps short sentences (SST-2's, 10 tokens at the median) from padding to 32."""
    lengths, n = [], smallest
    while n < max_seq_length:
        lengths.append(n)
        n *= 2
    return lengths + [max_seq_length]


def _choices(feature: Feature) -> tuple[int, ...]:
    """(C,) for a feature of C sequences (multiple choice), () for one sequence."""
    ids = feature["input_ids"]
    return (len(ids),) if len(ids) and isinstance(ids[0], (list, tuple, np.ndarray)) else ()


def _length(feature: Feature) -> int:
    """Tokens in the feature's longest sequence."""
    ids = feature["input_ids"]
    return max(map(len, ids)) if _choices(feature) else len(ids)


def _scalar_keys(feature: Feature, sequence_keys) -> list[str]:
    """Keys batched as one value per feature; `_`-prefixed keys stay on the host."""
    return [k for k in feature if k not in ("input_ids", "segment_ids", *sequence_keys)
            and not k.startswith("_")]


def _filler(feature: Feature, sequence_keys: Sequence[str]) -> Feature:
    """A zero feature with the same keys, for completing the last batch."""
    out = {k: 0 * feature[k] for k in _scalar_keys(feature, sequence_keys)}
    empty = [[0]] * _choices(feature)[0] if _choices(feature) else [0]
    return {**out, **{k: empty for k in ("input_ids", "segment_ids", *sequence_keys)}}


def collate(features: list[Feature], length: int, sequence_keys: Sequence[str] = (),
            weights: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """Pads features to `length`.

    input_ids, input_mask, segment_ids and each sequence key [B, L] int32 ([B, C, L] for features of
    C sequences); scalar keys [B]; example_weights [B] float32."""
    shape = (len(features), *_choices(features[0]), length)
    batch = {"input_ids": np.zeros(shape, np.int32)}
    batch["input_mask"] = np.zeros_like(batch["input_ids"])
    batch["segment_ids"] = np.zeros_like(batch["input_ids"])
    for key in sequence_keys:
        batch[key] = np.zeros(shape, np.float32 if key.endswith("weights") else np.int32)
    nested = bool(_choices(features[0]))
    for row, feature in enumerate(features):
        for key in ("input_ids", "segment_ids", *sequence_keys):
            sequences = feature[key] if nested else [feature[key]]
            rows = batch[key][row].reshape(-1, length)  # a view: [C, L] or [1, L]
            for i, values in enumerate(sequences):
                rows[i, :len(values)] = values
                if key == "input_ids":
                    batch["input_mask"][row].reshape(-1, length)[i, :len(values)] = 1
    for key in _scalar_keys(features[0], sequence_keys):
        batch[key] = np.asarray([f[key] for f in features])
    batch["example_weights"] = np.asarray(
        np.ones(len(features)) if weights is None else weights, np.float32)
    return batch


def _complete(features: list[Feature], batch_size: int, sequence_keys) -> tuple[list, list]:
    weights = [1.0] * len(features)
    while len(features) < batch_size:
        features = features + [_filler(features[0], sequence_keys)]
        weights.append(0.0)
    return features, weights


def padded_batches(features: list[Feature], batch_size: int, max_seq_length: int,
                   sequence_keys: Sequence[str] = (), *, bucketing: bool = False,
                   shuffle_seed: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Batches of `batch_size` rows in order (or shuffled with `shuffle_seed`).

    The last one is completed with zero-weight filler. With `bucketing`, batches are formed from
    chunks of 50 batches sorted by length and padded to the bucket that fits."""
    order = np.arange(len(features))
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(features))
    if bucketing:
        chunk = 50 * batch_size
        lengths = np.array([_length(f) for f in features])
        order = np.concatenate([c[np.argsort(lengths[c], kind="stable")]
                                for c in np.array_split(order, max(1, -(-len(order) // chunk)))])
    groups = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if shuffle_seed is not None and bucketing:  # don't feed short batches first
        groups = [groups[i] for i in np.random.default_rng(shuffle_seed + 1).permutation(
            len(groups))]
    buckets = bucket_lengths(max_seq_length)
    for group in groups:
        chosen, weights = _complete([features[i] for i in group], batch_size, sequence_keys)
        length = max_seq_length
        if bucketing:
            longest = max(_length(f) for f in chosen)
            length = next(b for b in buckets if b >= longest)
        yield collate(chosen, length, sequence_keys, weights)


def first_fit_rows(lengths: Sequence[int], max_seq_length: int,
                   max_per_row: int) -> list[list[int]]:
    """Greedy first-fit: indices of the features that share each row, in input order."""
    rows: list[list[int]] = []
    space: list[int] = []
    for i, n in enumerate(lengths):
        for r, free in enumerate(space[-64:], start=max(0, len(space) - 64)):
            if free >= n and len(rows[r]) < max_per_row:
                rows[r].append(i)
                space[r] -= n
                break
        else:
            rows.append([i])
            space.append(max_seq_length - n)
    return rows


def collate_packed(rows: list[list[Feature]], length: int, max_per_row: int,
                   sequence_keys: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Packed rows -> their [B, L] and [B, K] arrays.

    input_ids, input_mask, segment_ids, position_ids, example_ids (1..K, 0 = padding) and sequence
    keys [B, L]; cls_positions, example_weights and each scalar key [B, K]."""
    batch = {k: np.zeros((len(rows), length), np.int32)
             for k in ("input_ids", "input_mask", "segment_ids", "position_ids", "example_ids")}
    for key in sequence_keys:
        batch[key] = np.zeros((len(rows), length),
                              np.float32 if key.endswith("weights") else np.int32)
    first = next(f for row in rows for f in row)
    scalars = _scalar_keys(first, sequence_keys)
    for key in scalars:
        batch[key] = np.zeros((len(rows), max_per_row), np.asarray(first[key]).dtype)
    batch["cls_positions"] = np.zeros((len(rows), max_per_row), np.int32)
    batch["example_weights"] = np.zeros((len(rows), max_per_row), np.float32)
    for r, row in enumerate(rows):
        start = 0
        for k, feature in enumerate(row):
            n = len(feature["input_ids"])
            span = slice(start, start + n)
            batch["input_ids"][r, span] = feature["input_ids"]
            batch["segment_ids"][r, span] = feature["segment_ids"]
            batch["input_mask"][r, span] = 1
            batch["position_ids"][r, span] = np.arange(n)
            batch["example_ids"][r, span] = k + 1
            for key in sequence_keys:
                batch[key][r, span] = feature[key]
            for key in scalars:
                batch[key][r, k] = feature[key]
            batch["cls_positions"][r, k] = start
            batch["example_weights"][r, k] = 1.0
            start += n
    return batch


def packed_plan(features: list[Feature], max_seq_length: int, max_per_row: int,
                examples_per_batch: int, multiple: int = 1) -> tuple[float, int]:
    """(mean features per packed row, rows per batch).

    Enough rows that a batch holds about `examples_per_batch` features, so packed and padded runs
    take the same number of optimizer steps over the same examples; rounded up to `multiple`
    devices."""
    rows = first_fit_rows([len(f["input_ids"]) for f in features], max_seq_length, max_per_row)
    per_row = len(features) / max(1, len(rows))
    rows_per_batch = max(1, int(np.ceil(examples_per_batch / per_row)))
    return per_row, int(-(-rows_per_batch // multiple) * multiple)


def packed_batches(features: list[Feature], rows_per_batch: int, max_seq_length: int,
                   max_per_row: int, sequence_keys: Sequence[str] = (), *,
                   shuffle_seed: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """Shuffles, packs greedily and yields batches of `rows_per_batch` packed rows."""
    order = np.random.default_rng(shuffle_seed).permutation(len(features))
    rows = first_fit_rows([len(features[i]["input_ids"]) for i in order], max_seq_length,
                          max_per_row)
    rows = [[features[order[i]] for i in row] for row in rows]
    for start in range(0, len(rows), rows_per_batch):
        chunk = rows[start:start + rows_per_batch]
        chunk += [[]] * (rows_per_batch - len(chunk))  # empty rows: all weights 0
        yield collate_packed(chunk, max_seq_length, max_per_row, sequence_keys)
