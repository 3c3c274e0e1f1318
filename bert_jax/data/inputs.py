"""A pretraining run's input: the files `config.input_files` names, raw text converted
once into TFRecords (and reused while the options it was made with match), and each
process's batches. No jax here: the run passes in its process index and count.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Callable

import ml_collections

from bert_jax import compile_cache, paths
from bert_jax.atomic import atomic_directory
from bert_jax.data import corpus
from bert_jax.data.pipeline import PipelineOptions, make_pretrain_iterator
from bert_jax.errors import UserError

log = logging.getLogger(__name__)

DATA_OPTIONS_FILE = "options.json"  # the data_options a converted directory was made with


def is_tfrecord(path: str) -> bool:
    return ".tfrecord" in paths.basename(path)


def input_files(config: ml_collections.ConfigDict) -> list[str]:
    """The files config.input_files names (default: the embedded corpus); raises
    UserError when a pattern matches nothing or a file is empty."""
    patterns = [p for p in config.input_files.split(",") if p] or [corpus.DEFAULT_CORPUS]
    files = []
    for pattern in patterns:
        matches = paths.glob(pattern)
        if not matches:
            raise UserError(f"input_files: {pattern!r} matches no file")
        files += matches
    files = sorted(set(files))
    records = [f for f in files if is_tfrecord(f)]
    if records and len(records) < len(files):  # e.g. data/* catching summary.json
        skipped = [paths.basename(f) for f in files if not is_tfrecord(f)]
        log.warning("input_files: skipping %d file(s) that are not TFRecords beside the "
                    "TFRecords: %s", len(skipped), ", ".join(skipped[:5])
                    + (", ..." if len(skipped) > 5 else ""))
        files = records
    texts = [f for f in files if not is_tfrecord(f)]
    if texts:
        corpus.require_text(texts)
    if any(paths.getsize(f) == 0 for f in files):
        raise UserError(f"input_files: {next(f for f in files if not paths.getsize(f))} "
                        "is empty")
    return files


def check_eval_fraction(config: ml_collections.ConfigDict) -> None:
    """The held-out share must be in [0, 1), and above 0 when the run evaluates (else
    it would stop at the first evaluation, after training)."""
    if not 0 <= config.eval_fraction < 1:
        raise UserError(f"eval_fraction must be >= 0 and < 1, got {config.eval_fraction}")
    if config.eval_every_steps and not config.eval_fraction:
        raise UserError(f"eval_fraction 0 holds out nothing to evaluate on every "
                        f"eval_every_steps {config.eval_every_steps}: set --config.eval_fraction "
                        "(e.g. 0.01), or --config.eval_every_steps=0 to train without evaluation")


def check_records_vocabulary(files: list[str], tokenizer_path: str, vocabulary: str) -> None:
    """Refuses TFRecords whose create-data summary.json records another vocabulary
    (fingerprint) than the run's `vocabulary`: their token ids would mean other words."""
    from bert_jax.data.create_pretraining_data import SUMMARY_FILE
    for directory in sorted({paths.dirname(f) for f in files if is_tfrecord(f)}):
        try:
            summary = json.loads(paths.read_text(paths.join(directory, SUMMARY_FILE)))
        except (OSError, ValueError):
            continue  # records made elsewhere: nothing to compare
        made_with = summary.get("vocab_fingerprint") if isinstance(summary, dict) else None
        if made_with and made_with != vocabulary:
            raise UserError(
                f"the TFRecords in {directory} were made with the vocabulary "
                f"{summary.get('vocab', '?')} (its {SUMMARY_FILE}), not this run's "
                f"{tokenizer_path}: make them again with create-data --vocab "
                f"{tokenizer_path}, or pretrain with --config.tokenizer={summary.get('vocab')}")


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
            **({"masked_lm_prob": _mask_rate(config)} if _mask_rate(config) != 0.15 else {}),
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


def prepare_input_files(config: ml_collections.ConfigDict, workdir: str, tokenizer_path: str,
                        vocabulary: str, *, process_index: int, process_count: int,
                        message: Callable[[str], None] = log.info) -> list[str]:
    """TFRecord patterns for the pipeline. Raw text is converted by process 0 into a
    directory that records the options it was made with (`data_options`) and is reused
    while they match, rebuilt (atomically) when they do not: WORKDIR/data, or for the
    embedded corpus on a single process a per-machine cache (`data_cache_dir`) shared by
    every workdir. Multi-process runs convert into the workdir, which all must see: the
    caller has every process wait for process 0 before reading the files. `message`
    reports a conversion."""
    # Imported when text is converted: it loads the tokenizers.
    from bert_jax.data import create_pretraining_data as cpd
    files = input_files(config)
    if all(is_tfrecord(f) for f in files):
        return files
    num_shards = max(8, process_count)
    options = data_options(config, files, vocabulary, num_shards)
    key = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]
    out_dir = (paths.join(data_cache_dir(), key)
               if not config.input_files and process_count == 1
               else paths.join(workdir, "data"))
    names = [paths.basename(p) for p in cpd.shard_paths(out_dir, num_shards)]
    if process_index == 0 and _read_options(out_dir) != options:
        message(f"converting {len(files)} text file(s) into {out_dir}"
                + (" (options changed)" if paths.isdir(out_dir) else " (once)"))
        with atomic_directory(out_dir, overwrite=True) as tmp:
            cpd.create_pretraining_data(
                files, [paths.join(tmp, n) for n in names], tokenizer_path,
                cpd.Options(max_seq_length=config.max_seq_length,
                            max_predictions_per_seq=config.max_predictions_per_seq,
                            random_seed=config.seed,
                            do_whole_word_mask=config.whole_word_masking,
                            masked_lm_prob=_mask_rate(config),
                            static_masking=not config.dynamic_masking,
                            next_sentence_prediction=config.next_sentence_prediction,
                            sentence_order_prediction=config.sentence_order_prediction,
                            knowledge_masking=config.knowledge_masking,
                            knowledge_masking_prob=config.knowledge_masking_prob),
                # Workers would re-import an unguarded __main__ script.
                num_workers=1, progress=False)
            paths.write_text(paths.join(tmp, DATA_OPTIONS_FILE), json.dumps(options, indent=1))
    return [paths.join(out_dir, n) for n in names]


def _mask_rate(config) -> float:
    """The share of tokens masked (configs written before the key existed: BERT's 15%)."""
    return config.get("masked_lm_prob", 0.15)


def make_iterator(config, files, tokenizer, *, split: str, process_index: int,
                  process_count: int, state: dict | None = None):
    """Process `process_index`'s batches of `process_count`: [global_batch_size /
    process_count, ...] numpy dicts, from the position `state` (a `get_state()`)."""
    options = PipelineOptions(
        per_host_batch_size=config.global_batch_size // process_count,
        max_seq_length=config.max_seq_length,
        max_predictions_per_seq=config.max_predictions_per_seq,
        dynamic_masking=config.dynamic_masking, masked_lm_prob=_mask_rate(config),
        whole_word_masking=config.whole_word_masking or config.knowledge_masking != "none",
        knowledge_masking=config.knowledge_masking != "none",
        knowledge_masking_prob=config.knowledge_masking_prob, pack=config.packing,
        seed=config.seed, split=split, repeat=split == "train",
        eval_fraction=config.eval_fraction,
        next_sentence_prediction=config.next_sentence_prediction,
        sentence_order_prediction=config.sentence_order_prediction)
    return make_pretrain_iterator(files, options, process_index=process_index,
                                  process_count=process_count, tokenizer=tokenizer, state=state)
