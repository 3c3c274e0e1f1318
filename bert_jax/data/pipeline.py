"""The pretraining input pipeline: record shards -> fixed-shape numpy batches per host.

A reader puts the records in a seeded order per epoch and host and parses them in chunks: Grain
(`input_pipeline='grain'`, the default; ArrayRecord or TFRecord shards, no TensorFlow,
`grain_reader`) or tf.data (`'tf.data'`, TFRecord shards, `tfdata_reader`). Numpy then does the
rest, the same for both: held-out split, dynamic masking (`masking.mask_batch`, keyed by seed,
epoch, file and record, so an example's masks never depend on batching or on the reader) and
optional packing; the chunks are made ahead, off the training thread.

Exact resume: the state is the next example's place in the reader's stream,
`{"epoch": e, "position": p}`, saved in each checkpoint; no earlier epoch is replayed. Batches may
span epochs. Determinism needs the same files, the same options and the same reader (a run records
its `input_pipeline`).

The caller passes this host's place (`process_index`, `process_count`): the pipeline
imports no jax (Grain, which does, only when it runs).
"""
import queue
import threading
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np

from bert_jax.data import example_proto, packing, record_sources, tfrecord
from bert_jax.data.options import DataOptions
from bert_jax.data.prepare import ChunkPreparer
from bert_jax.errors import UserError
from bert_jax.host import paths

_CHUNK = 256  # examples gathered beyond a batch when packing
_EPOCHS_PER_READ = 8  # epochs per reader call: a tf.data pipeline's building is paid once


class PretrainIterator:
    """Iterator of batches (numpy dicts, see `make_pretrain_iterator`)."""

    def __init__(self, files: Sequence[str], options: DataOptions, *, process_index: int,
                 process_count: int, vocab_size: Optional[int],
                 special_ids: Optional[Dict[str, int]], word_start_table: Optional[np.ndarray]):
        self.files = list(files)
        self.options = options
        self.batch_size = options.per_host_batch_size
        self.max_seq_length = options.max_seq_length
        self.max_predictions = options.max_predictions_per_seq
        self.vocab_size = vocab_size
        self.special_ids = special_ids
        self.word_start_table = word_start_table
        self.process_index, self.process_count = process_index, process_count
        self.shuffle = options.split == "train"
        self.repeat = options.repeat and options.split == "train"
        self._prepare = ChunkPreparer(options, vocab_size, special_ids, word_start_table)
        self._reader = self._make_reader()
        self.set_state({"epoch": 0, "position": 0})

    def _make_reader(self):
        dynamic = self.options.dynamic_masking
        features = example_proto.pretraining_features(
            self.max_seq_length, self.max_predictions,
            word_starts=dynamic and self.word_start_table is not None,
            unit_starts=dynamic and self.options.knowledge_masking != "none")
        place = dict(seed=self.options.seed, shuffle=self.shuffle,
                     process_index=self.process_index, process_count=self.process_count)
        if self.options.input_pipeline == "grain":
            from bert_jax.data.grain_reader import GrainReader
            return GrainReader(self.files, features, threads=self.options.input_threads,
                               workers=self.options.input_workers, **place)
        from bert_jax.data.tfdata_reader import TfDataReader
        return TfDataReader(self.files, features, shuffle_buffer=self.options.shuffle_buffer,
                            **place)

    # -- state ------------------------------------------------------------------

    def get_state(self) -> dict:
        """JSON-serialisable position of the next example to deliver."""
        return dict(self._state)

    def set_state(self, state: dict) -> None:
        self._state = {"epoch": int(state["epoch"]), "position": int(state["position"])}
        self._pending: List[dict] = []  # parsed examples not yet delivered, in order
        if getattr(self, "_chunks", None) is not None:
            self._chunks.close()
        self._chunks = _Prefetched(
            self._chunk_stream(self._state["epoch"], self._state["position"]))

    # -- reading ------------------------------------------------------------------

    def _chunk_stream(self, epoch: int, position: int) -> Iterator[dict]:
        while True:
            count = _EPOCHS_PER_READ if self.repeat else 1
            delivered = 0
            for chunk in self._reader.read(epoch, position, count, self._prepare):
                delivered += len(chunk["input_ids"])
                yield chunk
            if not self.repeat:
                return
            if not delivered and position == 0:
                raise UserError(f"no {self.options.split} records for host "
                                f"{self.process_index} in "
                                f"{len(self.files)} files (empty files, or all held out?)")
            epoch, position = epoch + count, 0

    def _next_example_chunk(self) -> bool:
        for chunk in self._chunks:
            if len(chunk["input_ids"]):
                self._pending.append(chunk)
                return True
        return False

    # -- batching -------------------------------------------------------------------

    def __iter__(self):
        return self

    def close(self) -> None:
        """Releases the tf.data iterators now rather than whenever the GC runs.

        The GC can stall a later, unrelated step for seconds."""
        self._chunks.close()

    def __next__(self) -> Dict[str, np.ndarray]:
        batch = self._next_packed() if self.options.packing else self._next_plain()
        if batch is None:
            raise StopIteration
        return batch

    def _gather(self, count: int) -> Optional[dict]:
        """At least `count` pending examples (fewer at the end of the data) as one dict."""
        while sum(len(c["input_ids"]) for c in self._pending) < count:
            if not self._next_example_chunk():
                break
        if not self._pending:
            return None
        if len(self._pending) > 1:
            self._pending = [{k: np.concatenate([c[k] for c in self._pending])
                              for k in self._pending[0]}]
        return self._pending[0]

    def _consume(self, count: int) -> dict:
        """Removes the first `count` gathered examples; the state moves past them."""
        merged = self._pending[0]
        taken = {k: v[:count] for k, v in merged.items()}
        rest = {k: v[count:] for k, v in merged.items()}
        self._pending = [rest] if len(rest["input_ids"]) else []
        self._state = {"epoch": int(taken["epoch"][-1]), "position": int(taken["position"][-1]) + 1}
        return taken

    def _next_plain(self) -> Optional[dict]:
        if self._gather(self.batch_size) is None:
            return None
        taken = self._consume(self.batch_size)
        batch = {k: taken[k] for k in ("input_ids", "input_mask", "segment_ids",
                                       "masked_lm_positions", "masked_lm_ids",
                                       "masked_lm_weights", "next_sentence_labels")
                 if k in taken}
        missing = self.batch_size - len(batch["input_ids"])
        if missing:  # only at the end of a non-repeating split: rows of zeros (input_mask 0)
            batch = {k: np.concatenate([v, np.zeros((missing,) + v.shape[1:], v.dtype)])
                     for k, v in batch.items()}
        return batch

    def _next_packed(self) -> Optional[dict]:
        # B rows hold at most B * K examples; most rows hold few, so gather about B first
        # and more only while the rows are not yet decided (the same rows either way).
        most = self.batch_size * self.options.max_examples_per_row
        count = min(self.batch_size + _CHUNK, most)
        while True:
            pending = self._gather(count)
            if pending is None:
                return None
            gathered = len(pending["input_ids"])
            # B * K examples always fill B rows, the last one closed by the end of them
            rows = self._pack_plan(pending, at_end=gathered < count or count == most)
            if rows is not None:
                break
            count = min(2 * count, most)
        examples = self._consume(sum(len(r) for r in rows))
        rows += [[] for _ in range(self.batch_size - len(rows))]
        return packing.pack_rows(examples, rows, self.max_seq_length, self.max_predictions,
                                 self.options.max_examples_per_row)

    def _pack_plan(self, pending: dict, at_end: bool) -> Optional[List[List[int]]]:
        """The next batch's rows (indices into `pending`), greedily in stream order.

        None when `pending` ran out before B rows were closed and more may follow (not `at_end`)."""
        lengths = pending["input_mask"].sum(1).tolist()
        predictions = (pending["masked_lm_weights"] > 0).sum(1).tolist()
        rows, current, tokens, slots = [], [], 0, 0
        for index, (length, count) in enumerate(zip(lengths, predictions)):
            if not packing.row_fits(tokens, slots, len(current), length, count, self.max_seq_length,
                                    self.max_predictions, self.options.max_examples_per_row):
                rows.append(current)
                current, tokens, slots = [], 0, 0
                if len(rows) == self.batch_size:
                    return rows
            current.append(index)
            tokens, slots = tokens + length, slots + count
        if not at_end:
            return None
        return rows + [current]


def check_record_shapes(files: Sequence[str], max_seq_length: int,
                        max_predictions_per_seq: int) -> None:
    """Reads the first record of the first and the last file (TFRecord or ArrayRecord).

    Raises UserError naming the file and both numbers when its rows or masked positions are not the
    lengths the run asks for, or when it cannot be read (before any step, rather than a shape error
    at the first batch)."""
    for path in sorted({files[0], files[-1]}):
        try:
            records = record_sources.RecordFiles([path])
            raw = records[0] if len(records) else None
        except tfrecord.CorruptRecordError as e:
            raise UserError(f"{path}: not a readable TFRecord file ({e})") from None
        except (RuntimeError, ValueError, OSError) as e:  # array_record's reader
            raise UserError(f"{path}: not a readable ArrayRecord file "
                            f"({str(e).splitlines()[0]})") from None
        if raw is None:
            continue
        try:
            features = example_proto.Example.FromString(raw).features.feature
        except Exception:  # noqa: BLE001 - protobuf's DecodeError
            raise UserError(f"{path}: its records are not tf.train.Examples (not made by "
                            "bert-jax create-data)") from None
        for key, want, flag in (("input_ids", max_seq_length, "max_seq_length"),
                                ("masked_lm_positions", max_predictions_per_seq,
                                 "max_predictions_per_seq")):
            if key not in features:  # masks are optional (create-data --dynamic_masking)
                if key == "input_ids":
                    raise UserError(f"{path}: its records have no 'input_ids' (not "
                                    "pretraining data from bert-jax create-data)")
                continue
            have = len(features[key].int64_list.value)
            if have != want:
                raise UserError(f"{path} was written with {flag} {have} but the run asks "
                                f"for {want}: set --config.{flag}={have}, or recreate the "
                                f"data with bert-jax create-data --{flag} {want}")


def make_pretrain_iterator(file_patterns: Sequence[str], options: DataOptions, *,
                           process_index: int, process_count: int, tokenizer=None,
                           vocab_size: Optional[int] = None,
                           special_ids: Optional[Dict[str, int]] = None,
                           word_start_table: Optional[np.ndarray] = None,
                           state: Optional[dict] = None) -> PretrainIterator:
    """Batches of pretraining examples for host `process_index` of `process_count`.

    They start from the position `state` (a `get_state()`) or the start.

    Each batch (B = per_host_batch_size, L = max_seq_length,
    P = max_predictions_per_seq, see `DataOptions`) has input_ids, input_mask, segment_ids int32
    [B, L]; masked_lm_positions, masked_lm_ids int32 [B, P]; masked_lm_weights
    float32 [B, P]; next_sentence_labels int32 [B] (0 = IsNext, 1 = random;
    with sentence_order_prediction 0 = in order, 1 = swapped).
    With `packing=True` rows hold up to K = max_examples_per_row examples and also
    carry position_ids, example_ids int32 [B, L]; next_sentence_labels and
    next_sentence_positions become int32 [B, K], plus next_sentence_weights
    float32 [B, K]. With `next_sentence_prediction=False` (MLM-only records) batches
    have no next_sentence_* keys.

    Dynamic masking needs the vocabulary: pass `tokenizer` (a bert_jax
    Tokenizer) or `vocab_size` and `special_ids` ({'cls','sep','mask'} ids)
    and, for whole-word masking, `word_start_table` (bool [vocab]); a token
    starts a word where the table says so and the record's `word_start`
    feature (Chinese words, from create-data) agrees.
    `split='eval'` reads the records held out by `eval_fraction` (chosen by a
    hash of file and record index; training with the same fraction skips
    them) once, unshuffled; its last batch is padded with all-zero rows.
    """
    if options.split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', not {options.split!r}")
    if options.split == "eval" and options.eval_fraction <= 0:
        raise ValueError("split='eval' needs eval_fraction > 0")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index {process_index} is not in [0, {process_count})")
    files = sorted({f for pattern in file_patterns for f in paths.glob(pattern)})
    if not files:
        raise FileNotFoundError(f"no record files match {list(file_patterns)}")
    arrays = [f for f in files if record_sources.is_array_record(f)]
    if arrays and options.input_pipeline != "grain":
        raise UserError(f"{arrays[0]} is an ArrayRecord shard, which input_pipeline "
                        f"{options.input_pipeline!r} does not read: use input_pipeline 'grain'")
    if tokenizer is not None:
        vocab_size, special_ids = tokenizer.vocab_size, tokenizer.special_ids()
        if options.whole_units and word_start_table is None:
            word_start_table = tokenizer.word_start_table()
    if options.dynamic_masking and (vocab_size is None or special_ids is None):
        raise ValueError("dynamic masking needs `tokenizer` or `vocab_size` and `special_ids`")
    if options.dynamic_masking and options.whole_units and word_start_table is None:
        raise ValueError("whole-word masking needs `tokenizer` or `word_start_table`")
    iterator = PretrainIterator(
        files, options, process_index=process_index, process_count=process_count,
        vocab_size=vocab_size, special_ids=special_ids,
        word_start_table=word_start_table if options.whole_units else None)
    if state is not None:
        iterator.set_state(state)
    return iterator


def batch_spec(options: DataOptions, next_sentence_prediction: bool = True,
               batch_size: Optional[int] = None) -> Dict[str, tuple]:
    """{key: (shape, numpy dtype)} of the batches `make_pretrain_iterator` yields.

    Known without reading any data (and without TensorFlow): what a train step is compiled for.
    batch_size: rows per batch (default: options.per_host_batch_size)."""
    b = options.per_host_batch_size if batch_size is None else batch_size
    seq, preds = (b, options.max_seq_length), (b, options.max_predictions_per_seq)
    spec = {"input_ids": (seq, np.int32), "input_mask": (seq, np.int32),
            "segment_ids": (seq, np.int32), "masked_lm_positions": (preds, np.int32),
            "masked_lm_ids": (preds, np.int32), "masked_lm_weights": (preds, np.float32)}
    if options.packing:
        spec.update(position_ids=(seq, np.int32), example_ids=(seq, np.int32))
    if next_sentence_prediction and options.packing:
        rows = (b, options.max_examples_per_row)
        spec.update(next_sentence_labels=(rows, np.int32),
                    next_sentence_positions=(rows, np.int32),
                    next_sentence_weights=(rows, np.float32))
    elif next_sentence_prediction:
        spec["next_sentence_labels"] = ((b,), np.int32)
    return spec


class _Prefetched:
    """The items of a generator made ahead in a thread (at most `depth` waiting).

    The parsing and dynamic masking of the next chunks run while the caller trains. The items and
    their order are the generator's; its errors are raised by `next`."""

    def __init__(self, items: Iterator, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, args=(items,), daemon=True,
                                        name="bert_jax-input")
        self._thread.start()

    def _put(self, entry: tuple) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, items: Iterator) -> None:
        try:
            for item in items:
                if not self._put(("item", item)):
                    return
            self._put(("end", None))
        except BaseException as error:  # raised in the caller's thread by __next__
            self._put(("error", error))
        finally:
            items.close()  # in the thread that runs it

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        kind, value = self._queue.get()
        if kind == "item":
            return value
        self._done = True
        if kind == "error":
            raise value
        raise StopIteration

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.1)
            except queue.Empty:
                pass
        self._done = True
