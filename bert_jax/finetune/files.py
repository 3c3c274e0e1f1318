"""Reading and writing the files fine-tuning meets: CSV/TSV/JSONL tables, plain text
lines, CoNLL column files, JSONL predictions."""

from __future__ import annotations

import csv
import json
import os
from typing import Any, Iterable

csv.field_size_limit(1 << 30)  # emails and documents can exceed the 128 KB default


def table_format(path: str) -> str:
    """'csv', 'tsv', 'jsonl' or 'text' from the file name (`.gz` is not supported)."""
    name = path.lower()
    for ext, kind in ((".tsv", "tsv"), (".csv", "csv"), (".jsonl", "jsonl"), (".json", "jsonl"),
                      (".ndjson", "jsonl")):
        if name.endswith(ext):
            return kind
    return "text"


def read_table(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of a CSV/TSV (header line) or JSONL file as dicts, and the column names.
    A text file gives one row {'text': line} per non-empty line."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    kind = table_format(path)
    with open(path, encoding="utf-8", newline="") as f:
        if kind in ("csv", "tsv"):
            reader = csv.DictReader(f, delimiter="\t" if kind == "tsv" else ",",
                                    quoting=csv.QUOTE_NONE if kind == "tsv" else csv.QUOTE_MINIMAL)
            rows = list(reader)
            return rows, list(reader.fieldnames or [])
        if kind == "jsonl":
            rows = [json.loads(line) for line in f if line.strip()]
            columns = list(dict.fromkeys(k for row in rows for k in row))
            return rows, columns
        rows = [{"text": line.rstrip("\r\n")} for line in f if line.strip()]
        return rows, ["text"]


def column(rows: list[dict], columns: list[str], name: str, path: str, role: str) -> list:
    """The values of column `name`; a missing column names the ones the file has."""
    if name not in columns:
        raise ValueError(f"{path} has no {role} column {name!r}; its columns are: "
                         f"{', '.join(map(repr, columns)) or '(none)'} (set "
                         f"--config.{role}_column)")
    return [row.get(name) for row in rows]


def read_conll(path: str, tag_column: int = -1) -> list[dict[str, list[str]]]:
    """CoNLL-style columns: one token per line (token first, tag in `tag_column`),
    blank lines between sentences, `-DOCSTART-` lines skipped.
    Returns [{'words': [...], 'tags': [...]}]; a one-column file has no tags."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if parts and parts[0] == "-DOCSTART-":
                continue
            if not parts:
                if words:
                    sentences.append({"words": words, "tags": tags or None})
                words, tags = [], []
                continue
            words.append(parts[0])
            if len(parts) > 1:
                try:
                    tags.append(parts[tag_column])
                except IndexError:
                    raise ValueError(f"{path}:{number}: no column {tag_column} in "
                                     f"{line.rstrip()!r}") from None
    if words:
        sentences.append({"words": words, "tags": tags or None})
    return sentences


def write_jsonl(path: str, records: Iterable[dict[str, Any]]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def tfds_examples(name: str, split: str, *, data_dir: str | None = None,
                  download: bool = False) -> list[dict[str, Any]]:
    """All examples of a tensorflow-datasets split as numpy dicts (strings as bytes).

    Without `download` a data set that is not prepared fails at once with a message,
    instead of tfds retrying the network for minutes.
    """
    import tensorflow_datasets as tfds

    from bert_jax.tf_host import tensorflow
    tensorflow()
    try:
        ds = tfds.load(name, split=split, data_dir=data_dir or None, download=download)
    except (AssertionError, tfds.core.registered.DatasetNotFoundError, OSError) as e:
        where = data_dir or os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"
        raise ValueError(
            f"the data set {name!r} (split {split!r}) must be downloaded or prepared first: it "
            f"is not in {where}. With network access, rerun with --config.tfds_download=true "
            f"or run `tfds build {name}`; or point --config.tfds_data_dir at a prepared copy. "
            f"({type(e).__name__}: {str(e)[:200]})") from None
    return list(tfds.as_numpy(ds))


def text(value) -> str:
    """tfds strings arrive as bytes."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
