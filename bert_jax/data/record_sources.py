"""Pretraining shards as one random-access sequence of records, TensorFlow-free.

`RecordFiles(files)` is Grain's data-source protocol (`len`, `__getitem__`, `__getitems__`) over
the records of all `files` in order: ArrayRecord shards through array_record's reader, TFRecord
shards (local or in a bucket) through an index of their record offsets, built by reading every
record's 12-byte header once, CRCs checked as each record is read. Random access is what a global
shuffle needs; `locate` turns a global index into (file, record), the key of an example's masks.
"""
from __future__ import annotations

import struct
from typing import List, Sequence

import numpy as np

from bert_jax.data import tfrecord
from bert_jax.errors import UserError
from bert_jax.host import paths


def is_array_record(path: str) -> bool:
    """Whether `path` names an ArrayRecord shard (by its name, as create-data writes them)."""
    return path.endswith(".array_record")


_BLOCK = 8 << 20  # bytes per read when indexing a file in a bucket


def _headers(path: str):
    """Each record's 12-byte header (length, its CRC), then the last bytes (fewer than 12).

    A local file is read a header at a time, seeking past each record; a bucket's in blocks (a
    request per header would take minutes)."""
    remote = paths.is_remote(path)
    with paths.open(path, "rb") as f:
        block, block_start, position = b"", 0, 0
        while True:
            if not remote:
                f.seek(position)
                header = f.read(12)
            else:
                if position + 12 > block_start + len(block):
                    f.seek(position)
                    block, block_start = f.read(_BLOCK), position
                header = block[position - block_start:position - block_start + 12]
            if not header:
                return
            yield header
            if len(header) < 12:
                return
            position += 12 + struct.unpack_from("<Q", header)[0] + 4


class _TFRecordFile:
    """One TFRecord file's records by index.

    The index costs a read of each header (a seek past each record); a record read checks both
    CRCs."""

    def __init__(self, path: str):
        self.path = path
        starts, lengths, position = [], [], 0
        for header in _headers(path):
            length, crc = struct.unpack("<QI", header) if len(header) == 12 else (0, None)
            if crc is None or tfrecord.masked_crc(header[:8]) != crc:
                raise tfrecord.CorruptRecordError(
                    f"{path}: record {len(starts)} is cut short or has a corrupt length")
            starts.append(position)
            lengths.append(length)
            position += 12 + length + 4
        if position > paths.getsize(path):
            raise tfrecord.CorruptRecordError(f"{path}: record {len(starts) - 1} is cut short")
        self.starts, self.lengths = np.array(starts, np.int64), np.array(lengths, np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    def read_many(self, indices: Sequence[int]) -> List[bytes]:
        """The records at `indices`, checked (a bucket's requests all in flight at once)."""
        indices = np.asarray(indices, np.int64)
        starts, sizes = (self.starts[indices] + 12).tolist(), (self.lengths[indices] + 4).tolist()
        bodies = paths.read_slices(self.path, starts, sizes)
        return [self._checked(index, body, size - 4)
                for index, body, size in zip(indices.tolist(), bodies, sizes)]

    def _checked(self, index: int, body: bytes, length: int) -> bytes:
        if len(body) < length + 4:
            raise tfrecord.CorruptRecordError(f"{self.path}: record {index} is cut short")
        data = body[:length]
        if tfrecord.masked_crc(data) != struct.unpack_from("<I", body, length)[0]:
            raise tfrecord.CorruptRecordError(f"{self.path}: record {index} fails its checksum")
        return data


class _ArrayRecordFile:
    """One ArrayRecord file's records by index (written with group_size:1: one read each)."""

    def __init__(self, path: str):
        from array_record.python.array_record_module import ArrayRecordReader
        self.path = path
        if paths.is_remote(path):
            raise UserError(f"{path}: array_record reads ArrayRecord shards from local disk "
                            "only: copy them there (gcloud storage cp), or read TFRecord "
                            "shards, which the Grain pipeline streams from a bucket")
        self._reader = ArrayRecordReader(path, "readahead_buffer_size:0")
        if not self._reader.ok():
            raise UserError(f"{path}: not a readable ArrayRecord file (recreate it with "
                            "bert-jax create-data --format array_record)")
        self._count = self._reader.num_records()

    def __len__(self) -> int:
        return self._count

    def read_many(self, indices: Sequence[int]) -> List[bytes]:
        return self._reader.read(list(indices))

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])


class RecordFiles:
    """The records of `files` (all TFRecord or all ArrayRecord) as one sequence, in file order."""

    def __init__(self, files: Sequence[str]):
        self.files = list(files)
        self._files = [_ArrayRecordFile(f) if is_array_record(f) else _TFRecordFile(f)
                       for f in self.files]
        self.counts = np.array([len(f) for f in self._files], np.int64)
        self._ends = np.cumsum(self.counts)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def locate(self, indices: np.ndarray) -> tuple:
        """(file index, record index within it) of each global index."""
        indices = np.asarray(indices, np.int64)
        file_index = np.searchsorted(self._ends, indices, side="right")
        return file_index, indices - (self._ends[file_index] - self.counts[file_index])

    def __getitem__(self, index: int) -> bytes:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> List[bytes]:
        """The records at `indices`, in that order (one read call per file)."""
        file_index, record_index = self.locate(indices)
        out: List[bytes] = [b""] * len(file_index)
        for f in np.unique(file_index):
            rows = np.flatnonzero(file_index == f)
            records = self._files[f].read_many(record_index[rows].tolist())
            for row, record in zip(rows.tolist(), records):
                out[row] = record
        return out
