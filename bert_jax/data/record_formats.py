"""The two formats create-data writes its shards in: TFRecord and ArrayRecord.

Both hold the same serialized `tf.train.Example`s in the same order. ArrayRecord is written with
`group_size:1`, so that a reader can fetch any record by its index (what a global shuffle over
random access, Grain's, needs). ArrayRecord's writer takes local paths only: a shard for a bucket
is written to a local temporary file and then copied up.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterable, Iterator

from bert_jax.data import tfrecord
from bert_jax.host import paths

FORMATS = ("tfrecord", "array_record")
ARRAY_RECORD_OPTIONS = "group_size:1"


def write_records(target: str, records: Iterable[bytes], record_format: str) -> int:
    """Writes `records` to `target` (any path) in `record_format`; returns their number."""
    if record_format == "tfrecord":
        count = 0
        with paths.open(target, "wb") as f:
            for record in records:
                f.write(tfrecord.frame(record))
                count += 1
        return count
    from array_record.python.array_record_module import ArrayRecordWriter
    with _local(target) as local:
        writer = ArrayRecordWriter(local, ARRAY_RECORD_OPTIONS)
        try:
            count = 0
            for record in records:
                writer.write(record)
                count += 1
        finally:
            writer.close()
    return count


@contextlib.contextmanager
def _local(target: str) -> Iterator[str]:
    """A local path to write `target` at: itself, or a temporary file copied to it after."""
    if not paths.is_remote(target):
        yield target
        return
    handle, local = tempfile.mkstemp(suffix=".array_record")
    os.close(handle)
    try:
        yield local
        with open(local, "rb") as source, paths.open(target, "wb") as copy:
            while chunk := source.read(8 << 20):
                copy.write(chunk)
    finally:
        os.remove(local)


def read_array_records(path: str) -> list[bytes]:
    """Every record of a local ArrayRecord file, in order."""
    from array_record.python.array_record_module import ArrayRecordReader
    reader = ArrayRecordReader(path)
    try:
        return list(reader.read_all())
    finally:
        reader.close()
