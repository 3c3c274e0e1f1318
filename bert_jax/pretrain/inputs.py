"""A pretraining run's input (`RunInput`): its files, raw text converted, each process's batches.

The files `config.input_files` names are globbed and checked once (`resolve_files`), raw text is
converted once into TFRecords (and reused while the options it was made with match), and each
process gets its batches. No jax here: the run passes in its process index and count.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from typing import Callable

from bert_jax.data import corpus, data_record, record_sources, tfds_source, tfrecord
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import check_record_shapes, make_pretrain_iterator
from bert_jax.errors import UserError
from bert_jax.host import compile_cache, paths, tf_host
from bert_jax.host.folders import DATA_FOLDER, PRETRAINING_WORKDIR

log = logging.getLogger(__name__)


def is_tfrecord(path: str) -> bool:
    """Whether `path` is a TFRecord file, by its content, whatever its name.

    By `tfrecord.is_tfrecord_file`; read once per version of the file."""
    return _is_tfrecord(path, paths.getsize(path), paths.mtime_ns(path))


def is_shard(path: str) -> bool:
    """Whether `path` is a record shard.

    A TFRecord file (by content) or an ArrayRecord one (by name, as create-data --format
    array_record writes them)."""
    return record_sources.is_array_record(path) or is_tfrecord(path)


@functools.lru_cache(maxsize=65536)
def _is_tfrecord(path: str, size: int, mtime_ns: int) -> bool:
    return size > 0 and tfrecord.is_tfrecord_file(path)


def _is_json(path: str) -> bool:
    """A JSON file such as create-data's summary.json (small, and parses as JSON)."""
    if is_shard(path) or not 0 < paths.getsize(path) < (1 << 24):
        return False
    with paths.open(path, "rb") as f:
        if f.read(1) not in (b"{", b"["):
            return False
    try:
        json.loads(paths.read_text(path))
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


@dataclasses.dataclass(frozen=True)
class RunInput:
    """What a pretraining run reads: its input patterns, data options and tokenizer.

    The comma-separated `patterns` of config.input_files (empty: the embedded corpus), the data
    `options` its examples are made with (`Setup.data_options`), and its tokenizer's path and
    `vocabulary` (fingerprint), which TFRecords must have been made for and raw text is converted
    with."""

    patterns: str
    options: DataOptions
    tokenizer_path: str
    vocabulary: str


def input_files(patterns: str) -> list[str]:
    """The files the comma-separated `patterns` name (none: the embedded corpus).

    All TFRecords or all text, told apart by content; JSON files among them
    (create-data's summary.json) are skipped with a warning. Raises UserError when a pattern matches
    nothing, a file is empty, or TFRecords and text are mixed."""
    patterns = [p for p in patterns.split(",") if p] or [corpus.DEFAULT_CORPUS]
    by_name = [p for p in patterns if tfds_source.is_tfds(p)]  # converted as text is
    if by_name:
        if len(by_name) < len(patterns):
            raise UserError(f"input_files mixes corpora by name ({_shown(by_name)}) and "
                            "files: name one kind")
        for name in by_name:  # prepared where tfds looks, before anything is written
            tfds_source.pieces(name)
        return by_name
    files = []
    for pattern in patterns:
        matches = paths.glob(pattern)
        if not matches:
            raise UserError(f"input_files: {pattern!r} matches no file")
        files += matches
    files = sorted(set(files))
    skipped = [f for f in files if _is_json(f)]
    if skipped and len(skipped) < len(files):  # e.g. data/* catching summary.json
        log.warning("input_files: skipping %d file(s) that are not TFRecords or text: %s",
                    len(skipped), _shown([paths.basename(f) for f in skipped]))
        files = [f for f in files if f not in skipped]
    records = [f for f in files if is_shard(f)]
    texts = [f for f in files if not is_shard(f)]
    if texts and not records:
        corpus.require_text(texts)
    if any(paths.getsize(f) == 0 for f in files):
        raise UserError(f"input_files: {next(f for f in files if not paths.getsize(f))} "
                        "is empty")
    if records and texts:
        raise UserError(f"input_files mixes record shards ({_shown(records)}) and other "
                        f"files, read as text ({_shown(texts)}): name one kind")
    arrays = [f for f in records if record_sources.is_array_record(f)]
    if arrays and len(arrays) < len(records):
        raise UserError(f"input_files mixes ArrayRecord shards ({_shown(arrays)}) and "
                        "TFRecord ones: name one kind")
    return files


def resolve_files(run_input: RunInput) -> list[str]:
    """The run's input files (`input_files`), globbed and checked once, before anything is written.

    Checked for what reads them next (`prepare_input_files`): TFRecords must have rows and masked
    positions of the run's lengths (`check_record_shapes`, which reads their first records) and have
    been made for its vocabulary and setup (`check_records_made_for`)."""
    if run_input.options.input_pipeline == "tf.data":
        tf_host.tensorflow("--config.input_pipeline=tf.data")
    files, options = input_files(run_input.patterns), run_input.options
    records = [f for f in files if not tfds_source.is_tfds(f) and is_shard(f)]
    arrays = [f for f in records if record_sources.is_array_record(f)]
    if arrays and options.input_pipeline != "grain":
        raise UserError(f"input_files: {_shown(arrays)} are ArrayRecord shards, which "
                        f"--config.input_pipeline={options.input_pipeline} does not read: "
                        "set --config.input_pipeline=grain")
    if records:
        check_record_shapes(records, options.max_seq_length, options.max_predictions_per_seq)
    check_records_made_for(files, run_input.tokenizer_path, run_input.vocabulary, options)
    return files


def check_eval_fraction(eval_fraction: float, eval_every_steps: int) -> None:
    """The held-out share must leave examples to train on, and be above 0 when the run evaluates.

    The schema allows 0 to 1; at 0 an evaluating run would stop at the first evaluation, after
    training."""
    if eval_fraction >= 1:
        raise UserError(f"eval_fraction must be >= 0 and < 1, got {eval_fraction}")
    if eval_every_steps and not eval_fraction:
        raise UserError(f"eval_fraction 0 holds out nothing to evaluate on every "
                        f"eval_every_steps {eval_every_steps}: set --config.eval_fraction "
                        "(e.g. 0.01), or --config.eval_every_steps=0 to train without evaluation")


def check_records_made_for(files: list[str], tokenizer_path: str, vocabulary: str,
                           options: DataOptions) -> None:
    """Refuses TFRecords made for another vocabulary or a setup the run would train on wrongly.

    Refuses those whose record (`data_record`: create-data's options.json, or an earlier release's
    summary.json) names another vocabulary (fingerprint) than the run's `vocabulary` (their token
    ids would mean other words), or a setup the run's `options` would train on wrongly
    (`data_record.setup_mismatch`). Records without that record (made elsewhere, or before it
    existed) get one warning line."""
    unchecked = []
    for directory in sorted({paths.dirname(f) for f in files
                             if not tfds_source.is_tfds(f) and is_shard(f)}):
        record, source = data_record.read_record(directory) or ({}, DATA_FOLDER.record)
        made_with = record.get("vocabulary")
        if made_with and made_with != vocabulary:
            raise UserError(
                f"the record shards in {directory} were made with the vocabulary "
                f"{record.get('tokenizer', '?')} (its {source}), not this run's "
                f"{tokenizer_path}: make them again with create-data --tokenizer "
                f"{tokenizer_path}, or pretrain with --config.tokenizer={record.get('tokenizer')}")
        if not data_record.has_setup(record):
            unchecked.append(directory)
            continue
        mismatch = data_record.setup_mismatch(options, record)
        if mismatch:
            key, made, want = mismatch
            raise UserError(
                f"the record shards in {directory} were made with {key} {made} (its "
                f"{source}) but this run has {key} {want}: {_SETUP_ADVICE[key]}")
    if unchecked:
        log.warning("input_files: the TFRecords in %s have no record of the settings that "
                    "made them (a %s from bert-jax create-data): their vocabulary and "
                    "masking setup cannot be checked", ", ".join(unchecked), DATA_FOLDER.record)


_SETUP_ADVICE = {
    "max_seq_length": "set --config.max_seq_length to theirs, or make them again",
    "next_sentence_prediction": "set --config.next_sentence_prediction to theirs, or make "
                                "them again (create-data --no_next_sentence_prediction)",
    "sentence_order_prediction": "set --config.sentence_order_prediction to theirs, or make "
                                 "them again (create-data --sentence_order_prediction)",
    "dynamic_masking": "they have no masks (create-data --dynamic_masking): set "
                       "--config.dynamic_masking=True",
    "max_predictions_per_seq": "set --config.max_predictions_per_seq to theirs, or "
                               "--config.dynamic_masking=True to mask them anew",
    "whole_word_masking": "their static masks are as made: set --config.whole_word_masking "
                          "to theirs, or --config.dynamic_masking=True to mask them anew",
    "knowledge_masking": "set --config.knowledge_masking to theirs, or make them again "
                         "(create-data --knowledge_masking)",
    "knowledge_masking_prob": "their static masks are as made: set "
                              "--config.knowledge_masking_prob to theirs, or "
                              "--config.dynamic_masking=True to mask them anew",
}


def data_cache_dir() -> str:
    """Where the embedded corpus is converted once per machine.

    CACHE_ROOT/data (`compile_cache.cache_root`: $BERT_JAX_CACHE_DIR, else ~/.cache/bert_jax)."""
    return paths.join(compile_cache.cache_root(), "data")


def prepare_input_files(run_input: RunInput, files: list[str], workdir: str, *,
                        process_index: int, process_count: int,
                        message: Callable[[str], None] = log.info,
                        sync: Callable[[str], None] = lambda name: None) -> list[str]:
    """TFRecord patterns for the pipeline from the run's input `files`.

    The files are `resolve_files` of `run_input`: they themselves when they are TFRecords. Raw text
    is converted into a data folder whose record (`data_record`, written last) says what it was made
    from and with, reused while that matches: WORKDIR/data, or for the embedded corpus on a single
    process a per-machine cache (`data_cache_dir`) shared by every workdir. Every local core
    converts (`create_pretraining_data` workers), and on several processes each its share of the
    files into WORKDIR/data/parts (which all must see), process 0 assembling the shards once `sync`
    (a barrier across processes) says all are done; the caller has every process wait for process 0
    before reading them. The finished parts survive a stop, so a preempted conversion resumes. The
    run's data options are what conversion makes the examples with; `message` reports a
    conversion."""
    # Imported when text is converted: it loads the tokenizers.
    from bert_jax.data import create_pretraining_data as cpd
    if all(not tfds_source.is_tfds(f) and is_shard(f) for f in files):
        return files
    num_shards = max(8, process_count)
    options, tokenizer_path = run_input.options, run_input.tokenizer_path
    key = data_record.record_key(data_record.make_record(options, tokenizer_path,
                                                         run_input.vocabulary, files,
                                                         num_shards))
    out_dir = (paths.join(data_cache_dir(), key)
               if not run_input.patterns and process_count == 1
               else paths.join(workdir, PRETRAINING_WORKDIR.data))
    shards = cpd.shard_paths(out_dir, num_shards)
    found = data_record.read_record(out_dir)
    if found is not None and data_record.record_key(found[0]) == key:
        return shards
    workers = local_workers()
    if process_index == 0:
        message(f"converting {len(files)} text file(s) into {out_dir} with {workers} "
                f"worker(s) on {process_count} process(es)"
                + (" (options changed)" if paths.isdir(out_dir) else " (once)"))
        _warn_if_long(files, options.dupe_factor, workers * process_count, message)
        _clear(out_dir)
    parts = paths.join(out_dir, DATA_FOLDER.parts)
    cpd.create_pretraining_data(
        files, shards, tokenizer_path, options,
        num_workers=workers, progress=False, parts_dir=parts, host_index=process_index,
        num_hosts=process_count, summary_path=paths.join(out_dir, DATA_FOLDER.summary))
    if process_count > 1:
        sync("raw_text_parts_written")
        if process_index == 0:
            cpd.assemble(out_dir, num_shards, workers)
    if process_index == 0:
        paths.rmtree(parts, missing_ok=True)
    return shards


def local_workers() -> int:
    """The cores this process may use (its affinity where the OS tells it)."""
    import os
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# Raw text converted per second per worker, in MB x dupe_factor: 20.9 MB at dupe 5 took
# 17 s on one core of the 2-core build machine (BERT's rows, seq 128).
_MB_DUPES_PER_WORKER_SECOND = 6.0
_LONG_CONVERSION_S = 600


def _warn_if_long(files: list[str], dupe_factor: int, workers: int,
                  message: Callable[[str], None]) -> None:
    """One line when converting `files` would hold the first step for long."""
    size = sum(paths.getsize(f) for f in files if not tfds_source.is_tfds(f))
    seconds = size / 1e6 * dupe_factor / (_MB_DUPES_PER_WORKER_SECOND * workers)
    if seconds > _LONG_CONVERSION_S:
        message(f"converting {size / 1e9:.1f} GB of text (dupe_factor {dupe_factor}) on "
                f"{workers} worker(s) takes about {seconds / 3600:.1f} h before the first "
                "step; for a corpus this size `bert-jax create-data` prepares the records "
                "once, on as many machines as you have (docs/pretraining.md)")


def _clear(out_dir: str) -> None:
    """Removes what a conversion with other options left in `out_dir`.

    Its record goes first, so nothing reads it as complete; parts of other options are ignored, and
    the parts of these options kept: a stopped conversion resumes from them."""
    for name in (DATA_FOLDER.record, DATA_FOLDER.summary):
        if paths.exists(paths.join(out_dir, name)):
            paths.remove(paths.join(out_dir, name))
    for shard in paths.glob(paths.join(out_dir, DATA_FOLDER.shards)):
        paths.remove(shard)


def make_iterator(options: DataOptions, files, tokenizer, *, global_batch_size: int,
                  split: str, process_index: int, process_count: int,
                  state: dict | None = None):
    """Process `process_index`'s batches of `process_count`.

    [global_batch_size / process_count, ...] numpy dicts of the run's `options`
    (`Setup.data_options`), from the position `state` (a `get_state()`)."""
    options = dataclasses.replace(
        options, per_host_batch_size=global_batch_size // process_count, split=split,
        repeat=split == "train")
    return make_pretrain_iterator(files, options, process_index=process_index,
                                  process_count=process_count, tokenizer=tokenizer, state=state)
