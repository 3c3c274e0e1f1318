"""What a data folder's TFRecords were made with.

One record, `DATA_FOLDER.record` (options.json), written once beside the shards when they are
complete (`write_record`), read by pretraining's checks and its reuse of converted text
(`read_record`).

    {"format": 2, "tokenizer": PATH, "vocabulary": FINGERPRINT,
     the create-data fields of `DataOptions` under their names (max_seq_length,
       dynamic_masking, whole_word_masking, knowledge_masking, seed, dupe_factor, ...),
     "num_shards": N, "inputs": [what each input file is], "references": [...]}

Each concept has one name, the run config's (`DataOptions`, `--config.KEY`, create-data's
`--KEY`). Records of earlier releases read as this one: options.json of format 1
(`static_masking`; keys at their defaults left out), and create-data's summary.json or a
part's plan (`record_setup`, whose `static_masks` is `not dynamic_masking` and whose
`whole_word_masking` means whole units, with `vocab` and `vocab_fingerprint`). A record
without the masking setup (made before it was recorded) has `has_setup` False.
"""
from __future__ import annotations

import hashlib
import json
from typing import Sequence

from bert_jax.data import corpus, tfds_source
from bert_jax.data.options import DataOptions
from bert_jax.host import paths
from bert_jax.host.folders import DATA_FOLDER

RECORD_FORMAT = 2
# What a run trains on wrongly when it differs (`setup_mismatch`), in the order checked.
_SHAPE_KEYS = ("max_seq_length", "next_sentence_prediction", "sentence_order_prediction")
_STATIC_KEYS = ("dynamic_masking", "max_predictions_per_seq", "whole_word_masking",
                "knowledge_masking")


def input_identity(path: str) -> list:
    """What an input file is, for telling data made from it from data made from another.

    A tfds piece by its data set's version and size, the embedded corpus by name and size
    (the same wherever it is installed), a file by path, size and mtime."""
    if tfds_source.is_tfds(path):
        return tfds_source.identity(path)
    full = paths.abspath(path)
    if paths.dirname(full) == paths.abspath(corpus.CORPUS_DIR):
        return [paths.basename(full), paths.getsize(full)]
    return [full, paths.getsize(full), paths.mtime_ns(full)]


def make_record(options: DataOptions, tokenizer: str, vocabulary: str, files: Sequence[str],
         num_shards: int, references: Sequence[str] = ()) -> dict:
    """The record of data made from `files` into `num_shards` shards.

    Also from Chinese `references`, with `options`' create-data fields and the tokenizer at path
    `tokenizer`, whose fingerprint is `vocabulary`."""
    return {"format": RECORD_FORMAT, "tokenizer": paths.abspath(tokenizer),
            "vocabulary": vocabulary, **options.create_data_fields(), "num_shards": num_shards,
            "inputs": [input_identity(f) for f in files],
            "references": [input_identity(f) for f in references]}


def record_key(record: dict) -> str:
    """A short hash of what the data is.

    The record less the tokenizer's path (its fingerprint says what it holds). Equal keys: the same
    data."""
    made = {k: v for k, v in record.items() if k != "tokenizer"}
    return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()[:16]


def write_record(directory: str, record: dict) -> None:
    paths.write_text(paths.join(directory, DATA_FOLDER.record), json.dumps(record, indent=1))


def _json(path: str) -> dict | None:
    try:
        found = json.loads(paths.read_text(path))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def read_record(directory: str) -> tuple[dict, str] | None:
    """(the record of `directory`'s data, the file it was read from), or None when it has none.

    An earlier release's record reads as this one (`from_old_record`)."""
    record = _json(paths.join(directory, DATA_FOLDER.record))
    if record is not None and record.get("format") == RECORD_FORMAT:
        return record, DATA_FOLDER.record
    summary = _json(paths.join(directory, DATA_FOLDER.summary))
    if record is None and summary is None:
        return None
    old = from_old_record(summary or {})
    if record is not None:
        return {**old, **from_old_record(record)}, DATA_FOLDER.record
    return old, DATA_FOLDER.summary


def from_old_record(old: dict) -> dict:
    """An earlier release's record as this one.

    options.json of format 1, or create-data's summary.json or part plan (`run`); what it does not
    say is left out."""
    if old.get("format") == 1:  # keys at their defaults were left out
        record = {**DataOptions().create_data_fields(), "references": [], **old}
        if "static_masking" in record:
            record["dynamic_masking"] = not record.pop("static_masking")
        return {**record, "format": RECORD_FORMAT}
    record = {}
    if "vocab" in old:
        record["tokenizer"] = old["vocab"]
    if "vocab_fingerprint" in old:
        record["vocabulary"] = old["vocab_fingerprint"]
    setup = old.get("record_setup")
    if isinstance(setup, dict):  # the options with it are those it was made with
        options = dict(old.get("options") or {})
        setup = dict(setup)
        if "static_masks" in setup:
            setup["dynamic_masking"] = not setup.pop("static_masks")
        record.update({**options, **setup})
    return record


def record_of_part(meta: dict) -> dict:
    """The record in a create-data part's JSON (`shard_parts`).

    It may be of this release or an earlier one (its plan's `run`)."""
    return meta["record"] if "record" in meta else from_old_record(meta["run"])


def has_setup(record: dict) -> bool:
    """Whether the record says how the records were masked (older ones may not)."""
    return "dynamic_masking" in record


def _setup_value(values: dict, name: str):
    """A setting as the records bake it in.

    whole_word_masking means whole units (words, or ERNIE's longer units, which imply them)."""
    if name == "whole_word_masking":
        return bool(values["whole_word_masking"]) or \
            values.get("knowledge_masking", "none") != "none"
    return values[name]


def setup_mismatch(options: DataOptions, made: dict) -> tuple | None:
    """The first setting of the records that a run with `options` would train on wrongly.

    As (name, the records' value, this run's), for the records' record `made`; None when they fit.
    With dynamic masking the records' masks are not used, only their rows and units; masked_lm_prob
    is not compared (a run takes the records' static masks as made)."""
    want = options.create_data_fields()
    names = list(_SHAPE_KEYS)
    if not options.dynamic_masking:
        names += _STATIC_KEYS
        names += ["knowledge_masking_prob"] if options.knowledge_masking != "none" else []
    elif options.knowledge_masking != "none":  # the records must carry the units
        names.append("knowledge_masking")
    for name in names:
        if name in made and _setup_value(made, name) != _setup_value(want, name):
            return name, _setup_value(made, name), _setup_value(want, name)
    return None
