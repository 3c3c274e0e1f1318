"""The Grain reader of the pretraining pipeline (`input_pipeline='grain'`): no TensorFlow.

Epoch e on host h of n: the global indices of every record of every file (`RecordFiles`), every
n-th from the h-th of their permutation seeded by (seed, e) when training (`shuffle.permuted`: a
global shuffle, any record may follow any other; every host draws the same permutation). A
position in that sequence is the pipeline's state: resuming at position p starts there at once,
nothing is read to get there. Chunks of positions are ordered, read, parsed
(`example_proto.parse_examples`) and prepared (the pipeline's `ChunkPreparer`) in Grain's threads,
in order; with `workers`, in that many Grain worker processes (started once per `read`, a chunk
in turn each: the same chunks in the same order), which is what scales past one core, as the
parsing and masking hold Python's lock.

Grain imports jax: this module is imported only by a pipeline that runs it.
"""
from __future__ import annotations

import functools
from typing import Callable, Dict, Iterator, Sequence

import grain
import numpy as np

from bert_jax.data import example_proto, masking, shuffle
from bert_jax.data.record_sources import RecordFiles
from bert_jax.errors import UserError
from bert_jax.host import paths

# Tokens per chunk (1024 records at seq 128, 256 at 512): the work per record is a few numpy
# steps per chunk, so larger chunks cost less per record; a worker's chunk stays ~5 MB.
_CHUNK_TOKENS = 1 << 17


def default_threads(remote: bool) -> int:
    """Grain threads per reading process: 1 for local files, 8 for a bucket's.

    Reading local files is parsing and masking, which hold Python's lock: a second thread only
    contends for it (2 and 4 threads measured 1.05-1.4x slower than 1); a bucket's reads wait on
    the network."""
    return 8 if remote else 1


class GrainReader:
    """Prepared chunks of `files` for host `process_index` of `process_count` (see module)."""

    def __init__(self, files: Sequence[str], features: Dict[str, example_proto.FixedFeature], *,
                 seed: int, shuffle: bool, process_index: int, process_count: int,
                 threads: int = 0, workers: int = 0):
        self.records = RecordFiles(files)
        self.features, self.seed, self.shuffle = features, seed, shuffle
        self.process_index, self.process_count = process_index, process_count
        self.workers = workers
        self.threads = threads or default_threads(any(map(paths.is_remote, files)))
        self.chunk = max(64, _CHUNK_TOKENS // features["input_ids"].length)

    def epoch_order(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The global record indices at `positions` of this host's sequence in epoch `epoch`."""
        indices = self.process_index + positions * self.process_count
        if not self.shuffle:
            return indices
        return shuffle.permuted(indices, len(self.records),
                                masking.example_keys(self.seed, epoch, 0)[0])

    def read(self, epoch: int, skip: int, count: int,
             prepare: Callable[[dict], dict]) -> Iterator[dict]:
        """`prepare`d chunks of epochs epoch .. epoch + count - 1, the first from `skip` on."""
        length = len(range(self.process_index, len(self.records), self.process_count))
        epochs = []
        for number in range(epoch, epoch + count):
            start = min(skip, length) if number == epoch else 0
            chunks = -(-(length - start) // self.chunk)
            epochs.append(grain.MapDataset.range(chunks).map(
                _ChunkReader(self, number, start, length, prepare)))
        chunks = grain.MapDataset.concatenate(epochs).to_iter_dataset(grain.ReadOptions(
            num_threads=self.threads, prefetch_buffer_size=self.threads + 1))
        if self.workers:
            _absl_flags_parsed()
            chunks = chunks.mp_prefetch(grain.MultiprocessingOptions(
                num_workers=self.workers, per_worker_buffer_size=2))
        iterator = iter(chunks)
        try:
            for chunk in iterator:
                # copied out of the workers' shared memory, which is then freed at once
                yield {k: np.array(v) for k, v in chunk.items()} if self.workers else chunk
        finally:  # stops the threads and worker processes now, not when the GC runs
            iterator.close()


def _absl_flags_parsed() -> None:
    """Marks absl's flags parsed (their defaults) where nothing parsed them.

    Grain 0.2.18's worker processes read an absl flag, which fails unless absl's flags were
    parsed (google/grain#1355)."""
    from absl import flags
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


class _ChunkReader:
    """Chunk j of an epoch from position `start` on -> its parsed examples, keyed and prepared."""

    def __init__(self, reader: GrainReader, epoch: int, start: int, length: int,
                 prepare: Callable[[dict], dict]):
        self.records, self.features, self.size = reader.records, reader.features, reader.chunk
        self.order = functools.partial(reader.epoch_order, epoch)
        self.epoch, self.start, self.length, self.prepare = epoch, start, length, prepare

    def __call__(self, chunk_index: int) -> dict:
        first = self.start + chunk_index * self.size
        positions = np.arange(first, min(first + self.size, self.length), dtype=np.int64)
        indices = self.order(positions)
        file_index, record_index = self.records.locate(indices)
        serialized = self.records.__getitems__(indices)
        try:
            parsed = example_proto.parse_examples(serialized, self.features)
        except example_proto.RecordError as e:
            raise UserError(f"{self.records.files[file_index[e.row]]}: record "
                            f"{record_index[e.row]} {e.detail} (not pretraining data from "
                            "bert-jax create-data?)") from None
        parsed.update(position=positions, file_index=file_index.astype(np.int32),
                      record_index=record_index,
                      epoch=np.full(len(indices), self.epoch, np.int64))
        return self.prepare(parsed)
