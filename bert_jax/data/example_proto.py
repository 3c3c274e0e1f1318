"""tf.train.Example serialization and parsing without TensorFlow.

The few messages of TensorFlow's example.proto and feature.proto (same field numbers, proto3, packed
lists), built at import with `protobuf` alone, so create-data's workers skip TensorFlow's ~3 s
import and the Grain pipeline trains where TensorFlow is absent. Bytes equal TensorFlow's
`SerializeToString(deterministic=True)`, and `parse_examples` what `tf.io.parse_example` returns
for the same features (tests compare both).

`pretraining_features` is what a pretraining record holds: the one table both input pipelines
read it with."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from bert_jax.errors import UserError


def _example_class():
    file = descriptor_pb2.FileDescriptorProto(name="bert_jax_example.proto",
                                              package="bert_jax_example", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    def message(name, *fields):
        m = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".bert_jax_example.{type_name}"
        return m
    repeated, optional = T.LABEL_REPEATED, T.LABEL_OPTIONAL
    message("BytesList", ("value", 1, T.TYPE_BYTES, repeated, None))
    message("FloatList", ("value", 1, T.TYPE_FLOAT, repeated, None))
    message("Int64List", ("value", 1, T.TYPE_INT64, repeated, None))
    feature = message("Feature", ("bytes_list", 1, T.TYPE_MESSAGE, optional, "BytesList"),
                      ("float_list", 2, T.TYPE_MESSAGE, optional, "FloatList"),
                      ("int64_list", 3, T.TYPE_MESSAGE, optional, "Int64List"))
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    entry = message("Features", ("feature", 1, T.TYPE_MESSAGE, repeated, "Features.FeatureEntry"))
    map_entry = entry.nested_type.add(name="FeatureEntry")
    map_entry.options.map_entry = True
    map_entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=optional)
    map_entry.field.add(name="value", number=2, type=T.TYPE_MESSAGE, label=optional,
                        type_name=".bert_jax_example.Feature")
    message("Example", ("features", 1, T.TYPE_MESSAGE, optional, "Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bert_jax_example.Example"))


Example = _example_class()


def serialize_examples(rows: dict) -> List[bytes]:
    """Row dicts of numpy arrays ([N, ...] each) -> serialized tf.train.Examples.

    masked_lm_weights as a float list, every other key as an int64 list."""
    columns = {name: (np.asarray(values).reshape(len(values), -1).tolist(),
                      name == "masked_lm_weights") for name, values in rows.items()}
    serialized = []
    for i in range(len(rows["input_ids"])):
        example = Example()
        feature = example.features.feature
        for name, (values, is_float) in columns.items():
            (feature[name].float_list if is_float else feature[name].int64_list).value.extend(
                values[i])
        # Map entries in key order: otherwise the byte order varies between processes.
        serialized.append(example.SerializeToString(deterministic=True))
    return serialized


class RecordError(UserError):
    """A record that is not the Example a reader asks for.

    `row`: its index in the call; `detail`: what is wrong."""

    def __init__(self, row: int, detail: str):
        super().__init__(f"record {row} {detail}")
        self.row, self.detail = row, detail


@dataclasses.dataclass(frozen=True)
class FixedFeature:
    """A feature of `length` values in every record.

    A `float_list` when `is_float`, else an `int64_list`; a record without it reads `default`
    in each place (None: it must have it)."""

    length: int
    is_float: bool = False
    default: float | None = None


def pretraining_features(max_seq_length: int, max_predictions: int, word_starts: bool = True,
                         unit_starts: bool = True) -> Dict[str, FixedFeature]:
    """The features of create-data's records that a pretraining pipeline reads.

    The word and unit starts only for the dynamic masking that uses them (a row of defaults costs
    as much as one of data)."""
    seq, preds = max_seq_length, max_predictions
    features = {name: FixedFeature(seq) for name in ("input_ids", "input_mask", "segment_ids")}
    features.update(
        # Absent (-1) in MLM-only files (create-data --no_next_sentence_prediction).
        next_sentence_labels=FixedFeature(1, default=-1),
        # Present instead in sentence-order files (create-data --sentence_order_prediction).
        sentence_order_labels=FixedFeature(1, default=-1),
        # Absent in unmasked files (create-data --dynamic_masking).
        masked_lm_positions=FixedFeature(preds, default=0),
        masked_lm_ids=FixedFeature(preds, default=0),
        masked_lm_weights=FixedFeature(preds, is_float=True, default=0))
    if word_starts:  # written with whole-word masking (Chinese words need it: the vocabulary
        # alone cannot tell where they end); absent = any token may start one
        features["word_start"] = FixedFeature(seq, default=1)
    if unit_starts:  # written by create-data --knowledge_masking (ERNIE's entity/phrase
        # units); absent (-1) otherwise
        features["unit_start"] = FixedFeature(seq, default=-1)
    return features


def parse_examples(serialized: Sequence[bytes],
                   features: Dict[str, FixedFeature]) -> Dict[str, np.ndarray]:
    """Serialized tf.train.Examples -> {name: [N, length]} (float32 floats, int32 ints).

    Raises RecordError naming the record (its index here) and feature when one is not an Example,
    lacks a feature that has no default, or holds another number of values.

    Records laid out alike (create-data's: the same features in the same order) are walked
    together, a numpy step per field for all of them, and each feature's values decoded at once;
    any other layout, and any error, goes through protobuf record by record."""
    try:
        return _parse_together(serialized, features)
    except _Unusual:
        return _parse_with_protobuf(serialized, features)


class _Unusual(Exception):
    """Records the walk together does not read: protobuf decides."""


def _parse_together(serialized: Sequence[bytes],
                    features: Dict[str, FixedFeature]) -> Dict[str, np.ndarray]:
    sizes = np.fromiter(map(len, serialized), np.int64, len(serialized))
    if not len(sizes) or not sizes.all():
        raise _Unusual
    # zeros after the last record: every record's bytes (and a varint's width past them) can be
    # viewed as a row of one width, as `_rows` does
    buffer = np.frombuffer(b"".join([*serialized, bytes(int(sizes.max()) + 10)]), np.uint8)
    ends = np.cumsum(sizes)
    try:
        spans = _spans_together(buffer, ends - sizes, ends)
    except IndexError:  # a length past the end of the bytes
        raise _Unusual from None
    return {name: _column(buffer, spans.get(name.encode()), feature, len(sizes))
            for name, feature in features.items()}


def _expect(buffer: np.ndarray, positions: np.ndarray, byte: int) -> None:
    if (buffer[positions] != byte).any():
        raise _Unusual


def _varints(buffer: np.ndarray, positions: np.ndarray) -> tuple:
    """(the varint at each position, the position after it), for lengths (at most 5 bytes)."""
    byte = buffer[positions]
    if (byte < 0x80).all():  # the usual case: one byte each
        return byte.astype(np.int64), positions + 1
    value = np.zeros(len(positions), np.int64)
    going = np.ones(len(positions), bool)
    for i in range(5):
        byte = buffer[positions].astype(np.int64)
        value |= np.where(going, (byte & 0x7F) << (7 * i), 0)
        positions = positions + going
        going &= byte >= 0x80
        if not going.any():
            return value, positions
    raise _Unusual


def _spans_together(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict:
    """{name (bytes): (wire kind, starts, ends) of its packed values in every record}.

    Walks every record's bytes at once, a map entry at a time: an Example is its `features`
    (field 1), a map of entries (1) of a key (1) and a Feature (2), one list (1, 2 or 3: bytes,
    float, int64) of packed values (1)."""
    _expect(buffer, starts, 0x0A)
    length, position = _varints(buffer, starts + 1)
    if (position + length != ends).any():
        raise _Unusual
    spans = {}
    while not (position == ends).all():
        if (position == ends).any():  # not the same number of features
            raise _Unusual
        _expect(buffer, position, 0x0A)
        length, position = _varints(buffer, position + 1)
        entry_end = position + length
        _expect(buffer, position, 0x0A)
        key_length, position = _varints(buffer, position + 1)
        size = int(key_length[0])
        name = buffer[position[0]:position[0] + size]
        if (key_length != size).any() or (_rows(buffer, position, size) != name).any():
            raise _Unusual
        _expect(buffer, position + size, 0x12)
        length, position = _varints(buffer, position + size + 1)
        kind = buffer[position]
        if not length.all() or (kind != kind[0]).any():
            raise _Unusual
        length, position = _varints(buffer, position + 1)
        listed = length > 0
        if listed.any():
            _expect(buffer, position[listed], 0x0A)
            length[listed], position[listed] = _varints(buffer, position[listed] + 1)
        if (position + length != entry_end).any():
            raise _Unusual
        spans[name.tobytes()] = (int(kind[0]), position, entry_end)
        position = entry_end
    return spans


def _column(buffer: np.ndarray, span, feature: FixedFeature, count: int) -> np.ndarray:
    """One feature of every record, from its `_spans_together` span."""
    dtype = np.float32 if feature.is_float else np.int32
    if span is None:
        if feature.default is None:
            raise _Unusual  # protobuf's path names the record
        return np.full((count, feature.length), feature.default, dtype)
    kind, starts, ends = span
    if kind != (0x12 if feature.is_float else 0x1A):
        raise _Unusual
    sizes = ends - starts
    if feature.is_float:
        if (sizes != 4 * feature.length).any():
            raise _Unusual
        return _rows(buffer, starts, 4 * feature.length).view("<f4").astype(dtype)
    if (sizes == feature.length).all():  # a byte a value (masks, segments, labels, ids < 128)
        values = _rows(buffer, starts, feature.length)
        if (values >= 0x80).any():
            raise _Unusual
        return values.astype(dtype)
    return _varint_column(buffer, starts, sizes, feature.length).astype(dtype)


def _rows(buffer: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """[len(starts), width]: the bytes from each start.

    A copy of windows of the buffer: much faster than gathering by an index per byte."""
    return np.lib.stride_tricks.sliding_window_view(buffer, width)[starts]


def _varint_column(buffer: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                   length: int) -> np.ndarray:
    """[records, length] int64 values of the packed varints of `sizes` bytes from `starts`.

    Each record's bytes are a row of one array, padded past the longest (a varint read on ends
    in the padding); a varint's last byte is the one below 0x80, its value the 7-bit groups of
    its bytes, least significant first (a numpy step per byte of the longest, for all at once)."""
    width = int(sizes.max()) + 10
    rows = _rows(buffer, starts, width)
    flat = rows.reshape(-1)
    last = np.flatnonzero((rows < 0x80) & (np.arange(width) < sizes[:, None]))
    # every record holds `length` values, the last one ending where its bytes do
    row_ends = np.arange(0, len(flat), width) + sizes - 1
    if len(last) != length * len(sizes) or not np.array_equal(last[length - 1::length], row_ends):
        raise _Unusual
    first = np.empty_like(last)
    first[1:] = last[:-1] + 1
    first[::length] = np.arange(0, len(flat), width)
    size = last - first + 1
    widest = int(size.max())
    if widest > 10:
        raise _Unusual
    kind = np.uint32 if widest <= 4 else np.uint64  # values below 2**28: half the bytes
    value = (flat[first] & 0x7F).astype(kind)
    for k in range(1, widest):
        value |= ((flat[first + k] & 0x7F).astype(kind) << kind(7 * k)) * (size > k)
    return value.astype(np.uint64).view(np.int64).reshape(len(sizes), length)


def _parse_with_protobuf(serialized: Sequence[bytes],
                         features: Dict[str, FixedFeature]) -> Dict[str, np.ndarray]:
    columns = {name: np.empty((len(serialized), feature.length),
                              np.float32 if feature.is_float else np.int64)
               for name, feature in features.items()}
    kinds = [(name, feature, columns[name], "float_list" if feature.is_float else "int64_list")
             for name, feature in features.items()]
    for row, record in enumerate(serialized):
        try:
            found = Example.FromString(record).features.feature
        except DecodeError:
            raise RecordError(row, "is not a tf.train.Example") from None
        for name, feature, column, kind in kinds:
            if name not in found:
                if feature.default is None:
                    raise RecordError(row, f"has no {name!r}")
                column[row] = feature.default
                continue
            values = getattr(found[name], kind).value
            if len(values) != feature.length:
                raise RecordError(row, f"holds {len(values)} values of {name!r}, not "
                                       f"{feature.length}")
            column[row] = values
    return {name: column if column.dtype == np.float32 else column.astype(np.int32)
            for name, column in columns.items()}
