"""Corpora from tensorflow-datasets as create-data input.

`tfds:NAME[/CONFIG][:SPLIT]` (`tfds:wikipedia/20230601.en`, `tfds:c4/en:validation`; split `train`
by default).

Each record's text feature is a document and its lines are the sentences, as in a text
file. The split is read in PIECES even pieces (`tfds.even_splits`; one a record for a
smaller split), streamed one at a time: a piece is the unit of work that create-data gives a
worker or a host, as a text file is, so a corpus by name spreads over workers and hosts
without intermediate text.
"""

from __future__ import annotations

import functools
import os
from typing import List

from bert_jax.data.corpus import ReadStats
from bert_jax.errors import UserError
from bert_jax.host import tf_host

PREFIX = "tfds:"
PIECES = 64  # a piece is "tfds:NAME:SPLIT#k/PIECES"


def is_tfds(path: str) -> bool:
    return str(path).startswith(PREFIX)


def _parse(spec: str) -> tuple[str, str]:
    """(name with config, split) of `tfds:NAME[/CONFIG][:SPLIT]`."""
    body = spec[len(PREFIX):].split("#")[0]
    name, _, split = body.partition(":")
    if not name:
        raise UserError(f"{spec}: a tfds input is tfds:NAME[/CONFIG][:SPLIT]")
    return name, split or "train"


def _where() -> str:
    return os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"


def _builder(name: str):
    return _cached_builder(name, os.environ.get("TFDS_DATA_DIR"))


@functools.lru_cache(maxsize=None)  # read once per process and data dir, not per piece
def _cached_builder(name: str, data_dir: str | None):
    tf_host.tensorflow(f"tfds:{name} (read through tf.data)")
    tf_host.import_quietly()  # tfds imports TensorFlow, whose start-up lines reach the terminal
    import tensorflow_datasets as tfds
    try:
        return tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise UserError(f"tfds:{name}: tensorflow-datasets has no data set of that name "
                        "(`tfds build --help`, or the catalog at tensorflow.org/datasets)")
    except ValueError as e:  # an unknown config, among others
        raise UserError(f"tfds:{name}: {str(e).splitlines()[0]}") from None


def _text_key(builder, name: str) -> str:
    """The text feature: `text`, else the data set's only string feature."""
    import tensorflow_datasets as tfds
    features = builder.info.features
    texts = [k for k, f in features.items() if isinstance(f, tfds.features.Text)]
    if "text" in features:
        return "text"
    if len(texts) != 1:
        raise UserError(f"tfds:{name} has no single text feature to read documents from "
                        f"(its features: {', '.join(features)})")
    return texts[0]


def pieces(spec: str) -> List[str]:
    """The pieces of `spec` (a create-data input).

    First checks that the data set is prepared where tfds looks (TFDS_DATA_DIR): one line saying how
    to prepare it if not."""
    name, split = _parse(spec)
    builder = _builder(name)
    _text_key(builder, name)
    try:
        builder.as_dataset(split=split)
    except (AssertionError, OSError) as e:
        raise UserError(f"tfds:{name} (split {split!r}) is not prepared in {_where()}: with "
                        f"network access run `tfds build {name}` there (or copy a prepared "
                        f"folder, or set TFDS_DATA_DIR); {type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]}") from None
    except ValueError as e:  # tfds' words for a split it cannot read
        if "corresponds to no data" in str(e):
            raise _no_records(name, split) from None
        raise UserError(f"tfds:{name}:{split} is not a split of it (its splits: "
                        f"{', '.join(builder.info.splits)}; a part of one is written like "
                        f"train[:10%])") from None
    count = _piece_count(builder, name, split)
    return [f"{PREFIX}{name}:{split}#{k}/{count}" for k in range(count)]


def _piece_count(builder, name: str, split: str) -> int:
    """How many pieces a split is read in: PIECES, or one a record for a smaller split.

    (tfds cannot cut a split into more pieces than it has records.) UserError for an empty split."""
    try:
        size = builder.info.splits[split].num_examples
    except (KeyError, ValueError, TypeError):  # a split spelling the metadata cannot size
        return PIECES
    if not size:
        raise _no_records(name, split)
    return min(PIECES, size)


def _no_records(name: str, split: str) -> UserError:
    return UserError(f"tfds:{name}:{split} holds no records: choose another split")


def identity(piece: str) -> list:
    """What a piece is read from, for create-data's plan key.

    The data set's version and size (a rebuilt data set is another input)."""
    name, split = _parse(piece)
    info = _builder(name).info
    size = info.splits[split].num_examples if split in info.splits else None
    return [piece, str(info.version), size]


def read_piece(piece: str, stats: ReadStats) -> List[List[str]]:
    """The documents of one piece: each record's text, split into its non-empty lines."""
    tf_host.import_quietly()  # in a worker process too
    tf_host.tensorflow()
    import tensorflow_datasets as tfds
    name, split = _parse(piece)
    index, count = (int(n) for n in piece.rsplit("#", 1)[1].split("/"))
    builder = _builder(name)
    key = _text_key(builder, name)
    part = tfds.even_splits(split, n=count, drop_remainder=False)[index]
    documents = []
    stats.files += 1
    for record in tfds.as_numpy(builder.as_dataset(split=part)):
        text = record[key].decode("utf-8", errors="replace")
        stats.bytes += len(record[key])
        sentences = [line.strip() for line in text.splitlines() if line.strip()]
        stats.lines += len(sentences)
        if sentences:
            documents.append(sentences)
    stats.documents += len(documents)
    stats.empty_files += not documents
    return documents
