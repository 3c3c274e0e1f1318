"""TFRecord files through `bert_jax.host.paths`.

Records streamed from any path (a bucket included, with no local copy) and written to any path, CRCs
checked and written as TensorFlow does. tf.data reads local files itself; this is for the paths it
cannot reach (its own gs:// client has no emulator setting).

A record is: length (uint64 LE), masked CRC32C of the length, the bytes, masked
CRC32C of the bytes.
"""
from __future__ import annotations

import itertools
import struct
from typing import Iterator

import google_crc32c

from bert_jax.errors import UserError
from bert_jax.host import paths

_READ_SIZE = 8 << 20  # bytes per remote read: a few round trips per shard


class CorruptRecordError(UserError):
    """A TFRecord file that is cut short or fails its checksum."""


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def is_tfrecord_file(path: str) -> bool:
    """Whether `path` starts as a TFRecord file does.

    A length and its masked CRC (1 in 4 billion for other bytes). Reads 12 bytes."""
    with paths.open(path, "rb") as f:
        head = f.read(12)
    return len(head) == 12 and masked_crc(head[:8]) == struct.unpack_from("<I", head, 8)[0]


def read_records(path: str) -> Iterator[bytes]:
    """The records of one TFRecord file (uncompressed), in order."""
    with paths.open(path, "rb") as f:
        buffer, offset, index = b"", 0, 0
        while True:
            if len(buffer) - offset < 12:
                buffer, offset = buffer[offset:] + f.read(_READ_SIZE), 0
                if len(buffer) == 0:
                    return
                if len(buffer) < 12:
                    raise CorruptRecordError(f"{path}: record {index} is cut short")
            header = buffer[offset:offset + 8]
            length, crc = struct.unpack_from("<QI", buffer, offset)
            if masked_crc(header) != crc:
                raise CorruptRecordError(f"{path}: record {index} has a corrupt length")
            end = offset + 12 + length + 4
            while len(buffer) < end:
                more = f.read(max(_READ_SIZE, end - len(buffer)))
                if not more:
                    raise CorruptRecordError(f"{path}: record {index} is cut short")
                buffer, end, offset = buffer[offset:] + more, end - offset, 0
            data = buffer[offset + 12:end - 4]
            if masked_crc(data) != struct.unpack_from("<I", buffer, end - 4)[0]:
                raise CorruptRecordError(f"{path}: record {index} fails its checksum")
            yield data
            offset, index = end, index + 1


def frame(record: bytes) -> bytes:
    """One record as it lies in a TFRecord file."""
    header = struct.pack("<Q", len(record))
    return (header + struct.pack("<I", masked_crc(header)) + record
            + struct.pack("<I", masked_crc(record)))


def read_range(path: str, start: int, end: int) -> Iterator[bytes]:
    """The records framed in bytes [start, end) of a TFRecord file (`frame`'s output), in order."""
    with paths.open(path, "rb") as f:
        f.seek(start)
        position = start
        while position < end:
            header = f.read(12)
            length, crc = struct.unpack_from("<QI", header) if len(header) == 12 else (0, None)
            if crc is None or masked_crc(header[:8]) != crc:
                raise CorruptRecordError(f"{path}: the record at byte {position} is cut short "
                                         "or corrupt")
            body = f.read(length + 4)
            if len(body) < length + 4:
                raise CorruptRecordError(f"{path}: the record at byte {position} is cut short")
            yield body[:length]
            position += 12 + length + 4


def read_record_lists(path: str, size: int = 256) -> Iterator[list[bytes]]:
    """`read_records(path)` in lists of up to `size` records."""
    records = read_records(path)
    while chunk := list(itertools.islice(records, size)):
        yield chunk


class RecordWriter:
    """Writes a TFRecord file record by record (`write`, then `close`; a context manager).

    On an object store the file appears when closed."""

    def __init__(self, path: str):
        self._file = paths.open(path, "wb")

    def write(self, record: bytes) -> None:
        self._file.write(frame(record))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
