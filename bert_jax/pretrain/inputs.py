"""A pretraining run's input: the files `config.input_files` names, globbed and checked
once (`resolve_files`), raw text converted once into TFRecords (and reused while the options
it was made with match), and each process's batches. No jax here: the run passes in its
process index and count.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from typing import Callable

import ml_collections

from bert_jax.data import corpus, tfrecord
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import check_record_shapes, make_pretrain_iterator
from bert_jax.errors import UserError
from bert_jax.host import compile_cache, paths
from bert_jax.host.atomic import atomic_directory

log = logging.getLogger(__name__)

DATA_OPTIONS_FILE = "options.json"  # the data_options a converted directory was made with


def is_tfrecord(path: str) -> bool:
    """Whether `path` is a TFRecord file, by its content (`tfrecord.is_tfrecord_file`),
    whatever its name; read once per version of the file."""
    return _is_tfrecord(path, paths.getsize(path), paths.mtime_ns(path))


@functools.lru_cache(maxsize=65536)
def _is_tfrecord(path: str, size: int, mtime_ns: int) -> bool:
    return size > 0 and tfrecord.is_tfrecord_file(path)


def _is_json(path: str) -> bool:
    """A JSON file such as create-data's summary.json (small, and parses as JSON)."""
    if is_tfrecord(path) or not 0 < paths.getsize(path) < (1 << 24):
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


def input_files(config: ml_collections.ConfigDict) -> list[str]:
    """The files config.input_files names (default: the embedded corpus), all TFRecords
    or all text, told apart by content; JSON files among them (create-data's summary.json)
    are skipped with a warning. Raises UserError when a pattern matches nothing, a file
    is empty, or TFRecords and text are mixed."""
    patterns = [p for p in config.input_files.split(",") if p] or [corpus.DEFAULT_CORPUS]
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
    records = [f for f in files if is_tfrecord(f)]
    texts = [f for f in files if not is_tfrecord(f)]
    if texts and not records:
        corpus.require_text(texts)
    if any(paths.getsize(f) == 0 for f in files):
        raise UserError(f"input_files: {next(f for f in files if not paths.getsize(f))} "
                        "is empty")
    if records and texts:
        raise UserError(f"input_files mixes TFRecord files ({_shown(records)}) and other "
                        f"files, read as text ({_shown(texts)}): name one kind")
    return files


def resolve_files(config: ml_collections.ConfigDict, options: DataOptions,
                  tokenizer_path: str, vocabulary: str) -> list[str]:
    """The run's input files (`input_files`), globbed and checked once, before anything
    is written, for what reads them next (`prepare_input_files`): TFRecords must have
    rows and masked positions of the run's lengths (`check_record_shapes`, which reads
    their first records) and have been made for its vocabulary and setup
    (`check_records_made_for`). options: the run's (`Setup.data_options`)."""
    files = input_files(config)
    records = [f for f in files if is_tfrecord(f)]
    if records:
        check_record_shapes(records, options.max_seq_length, options.max_predictions_per_seq)
    check_records_made_for(files, tokenizer_path, vocabulary, options)
    return files


def check_eval_fraction(config: ml_collections.ConfigDict) -> None:
    """The held-out share must leave examples to train on (the schema allows 0 to 1), and
    be above 0 when the run evaluates (else it would stop at the first evaluation, after
    training)."""
    if config.eval_fraction >= 1:
        raise UserError(f"eval_fraction must be >= 0 and < 1, got {config.eval_fraction}")
    if config.eval_every_steps and not config.eval_fraction:
        raise UserError(f"eval_fraction 0 holds out nothing to evaluate on every "
                        f"eval_every_steps {config.eval_every_steps}: set --config.eval_fraction "
                        "(e.g. 0.01), or --config.eval_every_steps=0 to train without evaluation")


def check_records_made_for(files: list[str], tokenizer_path: str, vocabulary: str,
                           options: DataOptions) -> None:
    """Refuses TFRecords whose create-data summary.json records another vocabulary
    (fingerprint) than the run's `vocabulary` (their token ids would mean other words),
    or a setup the run's `options` would train on wrongly (`DataOptions.setup_mismatch`).
    Records without that record (made elsewhere, or before it existed) get one warning
    line."""
    from bert_jax.data.create_pretraining_data import SUMMARY_FILE
    unchecked = []
    for directory in sorted({paths.dirname(f) for f in files if is_tfrecord(f)}):
        try:
            summary = json.loads(paths.read_text(paths.join(directory, SUMMARY_FILE)))
        except (OSError, ValueError):
            summary = None
        summary = summary if isinstance(summary, dict) else {}
        made_with = summary.get("vocab_fingerprint")
        if made_with and made_with != vocabulary:
            raise UserError(
                f"the TFRecords in {directory} were made with the vocabulary "
                f"{summary.get('vocab', '?')} (its {SUMMARY_FILE}), not this run's "
                f"{tokenizer_path}: make them again with create-data --tokenizer "
                f"{tokenizer_path}, or pretrain with --config.tokenizer={summary.get('vocab')}")
        if not isinstance(summary.get("record_setup"), dict):
            unchecked.append(directory)
            continue
        mismatch = options.setup_mismatch(summary["record_setup"])
        if mismatch:
            key, made, want = mismatch
            raise UserError(
                f"the TFRecords in {directory} were made with {key} {made} (its "
                f"{SUMMARY_FILE}) but this run has {key} {want}: {_SETUP_ADVICE[key]}")
    if unchecked:
        log.warning("input_files: the TFRecords in %s have no record of the settings that "
                    "made them (a %s from bert-jax create-data): their vocabulary and "
                    "masking setup cannot be checked", ", ".join(unchecked), SUMMARY_FILE)


_SETUP_ADVICE = {
    "max_seq_length": "set --config.max_seq_length to theirs, or make them again",
    "next_sentence_prediction": "set --config.next_sentence_prediction to theirs, or make "
                                "them again (create-data --no_next_sentence_prediction)",
    "sentence_order_prediction": "set --config.sentence_order_prediction to theirs, or make "
                                 "them again (create-data --sentence_order_prediction)",
    "static_masks": "they have no masks (create-data --dynamic_masking): set "
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
    """Where the embedded corpus is converted once per machine: CACHE_ROOT/data
    (`compile_cache.cache_root`: $BERT_JAX_CACHE_DIR, else ~/.cache/bert_jax)."""
    return paths.join(compile_cache.cache_root(), "data")


def data_options(config: ml_collections.ConfigDict, files: list[str], vocabulary: str,
                 num_shards: int) -> dict:
    """What converted text depends on; recorded next to the TFRecords and compared on
    reuse. Files are named by path, size and mtime (the embedded corpus by name and size,
    identical wherever it is installed)."""
    embedded = not config.input_files
    return {"format": 1, "vocabulary": vocabulary, "max_seq_length": config.max_seq_length,
            "max_predictions_per_seq": config.max_predictions_per_seq,
            "whole_word_masking": config.whole_word_masking,
            # Only when not BERT's 15%: data converted before the option existed stays valid.
            **({"masked_lm_prob": config.masked_lm_prob} if config.masked_lm_prob != 0.15 else {}),
            "static_masking": not config.dynamic_masking, "seed": config.seed,
            "next_sentence_prediction": config.next_sentence_prediction,
            # Only when on: data converted before the option existed stays valid.
            **({"sentence_order_prediction": True} if config.sentence_order_prediction
               else {}),
            **({"knowledge_masking": config.knowledge_masking,
                "knowledge_masking_prob": config.knowledge_masking_prob}
               if config.knowledge_masking != "none" else {}),
            "num_shards": num_shards,
            "inputs": [[paths.basename(f), paths.getsize(f)] if embedded
                       else [paths.abspath(f), paths.getsize(f), paths.mtime_ns(f)]
                       for f in files]}


def _read_options(directory: str) -> dict | None:
    try:
        return json.loads(paths.read_text(paths.join(directory, DATA_OPTIONS_FILE)))
    except (OSError, ValueError):
        return None


def prepare_input_files(config: ml_collections.ConfigDict, options: DataOptions,
                        files: list[str], workdir: str, tokenizer_path: str, vocabulary: str,
                        *, process_index: int, process_count: int,
                        message: Callable[[str], None] = log.info) -> list[str]:
    """TFRecord patterns for the pipeline from the run's input `files` (`resolve_files`): they
    themselves when they are TFRecords. Raw text is converted by process 0 into a
    directory that records the options it was made with (`data_options`) and is reused
    while they match, rebuilt (atomically) when they do not: WORKDIR/data, or for the
    embedded corpus on a single process a per-machine cache (`data_cache_dir`) shared by
    every workdir. Multi-process runs convert into the workdir, which all must see: the
    caller has every process wait for process 0 before reading the files. options: the
    run's (`Setup.data_options`), which conversion makes the examples with; `message`
    reports a conversion."""
    # Imported when text is converted: it loads the tokenizers.
    from bert_jax.data import create_pretraining_data as cpd
    if all(is_tfrecord(f) for f in files):
        return files
    num_shards = max(8, process_count)
    made_with = data_options(config, files, vocabulary, num_shards)
    key = hashlib.sha256(json.dumps(made_with, sort_keys=True).encode()).hexdigest()[:16]
    out_dir = (paths.join(data_cache_dir(), key)
               if not config.input_files and process_count == 1
               else paths.join(workdir, "data"))
    names = [paths.basename(p) for p in cpd.shard_paths(out_dir, num_shards)]
    if process_index == 0 and _read_options(out_dir) != made_with:
        message(f"converting {len(files)} text file(s) into {out_dir}"
                + (" (options changed)" if paths.isdir(out_dir) else " (once)"))
        with atomic_directory(out_dir, overwrite=True) as tmp:
            cpd.create_pretraining_data(
                files, [paths.join(tmp, n) for n in names], tokenizer_path, options,
                # Workers would re-import an unguarded __main__ script.
                num_workers=1, progress=False)
            paths.write_text(paths.join(tmp, DATA_OPTIONS_FILE),
                             json.dumps(made_with, indent=1))
    return [paths.join(out_dir, n) for n in names]


def make_iterator(options: DataOptions, files, tokenizer, *, global_batch_size: int,
                  split: str, process_index: int, process_count: int,
                  state: dict | None = None):
    """Process `process_index`'s batches of `process_count`: [global_batch_size /
    process_count, ...] numpy dicts of the run's `options` (`Setup.data_options`), from
    the position `state` (a `get_state()`)."""
    options = dataclasses.replace(
        options, per_host_batch_size=global_batch_size // process_count, split=split,
        repeat=split == "train")
    return make_pretrain_iterator(files, options, process_index=process_index,
                                  process_count=process_count, tokenizer=tokenizer, state=state)
