"""Reading and writing the files fine-tuning meets.

CSV/TSV/JSONL tables, plain text lines, CoNLL column files, JSONL predictions."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from typing import Any, Iterable

from bert_jax.errors import UserError
from bert_jax.host import encoding, library_log, paths

log = logging.getLogger(__name__)

csv.field_size_limit(1 << 30)  # emails and documents can exceed the 128 KB default


def table_format(path: str) -> str:
    """'csv', 'tsv', 'jsonl' or 'text' from the file name (`.gz` is not supported)."""
    name = path.lower()
    for ext, kind in ((".tsv", "tsv"), (".csv", "csv"), (".jsonl", "jsonl"), (".json", "jsonl"),
                      (".ndjson", "jsonl")):
        if name.endswith(ext):
            return kind
    return "text"


def read_text_file(path: str) -> str:
    """The whole file as text.

    Bytes that are not UTF-8 fail with the file, the line and the byte; a UTF-8 byte-order mark
    (spreadsheet exports) is dropped."""
    if not paths.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    return encoding.decode(paths.read_bytes(path), path)


class Row(dict):
    """A table row (or an example read from one) that knows its file and line (for messages).

    It equals the plain dict of its values."""

    def __init__(self, values: dict, line: int, path: str = ""):
        super().__init__(values)
        self.line = line
        self.path = path

    @property
    def where(self) -> str:
        """'PATH:LINE' (or the line alone when the path is not known)."""
        return f"{self.path}:{self.line}" if self.path else f"line {self.line}"


def where(example, path: str = "") -> str | None:
    """An example's 'PATH:LINE' when it was read from a file (a `Row`), else `path` or None."""
    return example.where if isinstance(example, Row) else (path or None)


def label_value(value):
    """A label as read from a file, compared after stripping surrounding whitespace.

    'ham ' and 'ham' are one class; values that are not strings are returned as they are."""
    return value.strip() if isinstance(value, str) else value


def read_table(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of a CSV/TSV (header line) or JSONL file as dicts, and the column names.

    A text file gives one row {'text': line} per non-empty line. A row whose field count differs
    from the header's, or a JSONL line that is not a JSON object, fails with its line number."""
    kind = table_format(path)
    text = read_text_file(path)
    if kind in ("csv", "tsv"):
        reader = csv.DictReader(io.StringIO(text, newline=""),
                                delimiter="\t" if kind == "tsv" else ",",
                                quoting=csv.QUOTE_NONE if kind == "tsv" else csv.QUOTE_MINIMAL)
        rows, spanning, end = [], [], 1
        for row in reader:
            # A quoted CSV field may hold line breaks: the row starts that many lines up
            # (or after the previous row, when an unclosed quote took the file's last break).
            breaks = sum(v.count("\n") for v in row.values() if isinstance(v, str))
            start, end = max(reader.line_num - breaks, end + 1), reader.line_num
            # DictReader files extra fields under the key None, missing ones as None.
            if None in row or None in row.values():
                fields = (len(reader.fieldnames) + len(row.pop(None, []))
                          - sum(v is None for v in row.values()))
                if breaks:
                    raise UserError(f'{path}:{start}: a quote (") opened on this line is not '
                                    f"closed until line {reader.line_num}, which makes "
                                    f"{fields} fields where the header has "
                                    f"{len(reader.fieldnames)}; remove the stray quote or "
                                    'double it ("")')
                raise UserError(f"{path}:{reader.line_num}: {fields} fields, but the header "
                                f"has {len(reader.fieldnames)}"
                                + (" (a tab inside a text?)" if kind == "tsv" else ""))
            if breaks:
                spanning.append(start)
            rows.append(Row(row, line=start, path=path))
        if spanning:
            log.warning('%s: %d row(s) hold quoted text over several lines (starting on line '
                        '%s): if a stray quote (") merged rows, remove it or double it ("")',
                        path, len(spanning), ", ".join(map(str, spanning[:5]))
                        + (", ..." if len(spanning) > 5 else ""))
        return rows, list(reader.fieldnames or [])
    if kind == "jsonl":
        rows = []
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{number}: not valid JSON ({e.msg}); JSONL files hold "
                                "one JSON object per line") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}:{number}: expected a JSON object, got "
                                f"{type(row).__name__}")
            rows.append(Row(row, line=number, path=path))
        columns = list(dict.fromkeys(k for row in rows for k in row))
        return rows, columns
    rows = [{"text": line.rstrip("\n")} for line in io.StringIO(text, newline=None)
            if line.strip()]
    return rows, ["text"]


def read_headerless(path: str, names: list[str]) -> list[dict[str, str]]:
    """Rows of a delimited file without a header line, any extension.

    Fields are named by `names` in order (e.g. ['label', 'text'], the usual Chinese news and review
    format), split on tabs (on commas, CSV-quoted, for `.csv`). Blank lines are skipped; a line with
    another number of fields, or a first line that is the header itself, fails with its line
    number."""
    text = read_text_file(path)
    comma = path.lower().endswith(".csv")
    lines = io.StringIO(text, newline="")
    reader = (csv.reader(lines) if comma else
              (line.rstrip("\r\n").split("\t") for line in lines))
    rows = []
    for number, fields in enumerate(reader, 1):
        if not any(f.strip() for f in fields):
            continue
        if len(fields) != len(names):
            raise UserError(f"{path}:{number}: {len(fields)} fields, but the columns are "
                            f"{', '.join(names)} (--config.columns)"
                            + ("" if comma else " (a tab inside a text?)"))
        if number == 1 and [f.strip().lower() for f in fields] == [n.lower() for n in names]:
            raise UserError(f"{path}:1 is a header line ({', '.join(fields)}), but "
                            "--config.columns says the file has none: drop the header "
                            "line, or --config.columns to read the header")
        rows.append(Row(dict(zip(names, fields)), number, path))
    return rows


def column(rows: list[dict], columns: list[str], name: str, path: str, role: str,
           fix: str = "") -> list:
    """The values of column `name`.

    A missing column names the ones the file has and `fix` (default: the config key that names the
    column)."""
    if name not in columns:
        raise UserError(f"{path} has no {role} column {name!r}; its columns are: "
                        f"{', '.join(map(repr, columns)) or '(none)'} "
                        f"({fix or f'set --config.{role}_column'})")
    return [row.get(name) for row in rows]


def labels(rows: list[dict], columns: list[str], name: str, path: str, *,
           required: bool = True) -> list:
    """The label column, each value stripped of surrounding whitespace (`label_value`).

    With `required`, a blank cell fails naming its file and line (it is not a class); otherwise
    it is None."""
    values = [label_value(v) for v in column(rows, columns, name, path, "label")]
    for index, (row, value) in enumerate(zip(rows, values)):
        if value is None or value == "":
            if required:
                raise UserError(f"{path}:{getattr(row, 'line', '?')}: blank label (column "
                                f"{name!r}); every labeled row needs one")
            values[index] = None
    return values


def read_conll(path: str, tag_column: int = -1) -> list[dict[str, list[str]]]:
    """CoNLL-style columns: one token per line, blank lines between sentences.

    The token comes first, the tag in `tag_column`; `-DOCSTART-` lines are skipped. Returns
    [{'words': [...], 'tags': [...]}]; a one-column file has no tags. Each sentence is a `Row`
    at its first line, with `lines`, the line of each word."""
    sentences, words, tags, lines = [], [], [], []

    def sentence() -> Row:
        row = Row({"words": words, "tags": tags or None}, lines[0], path)
        row.lines = lines
        return row

    for number, line in enumerate(io.StringIO(read_text_file(path)), 1):
        parts = line.split()
        if parts and parts[0] == "-DOCSTART-":
            continue
        if not parts:
            if words:
                sentences.append(sentence())
            words, tags, lines = [], [], []
            continue
        if len(parts) > 1:
            try:
                tags.append(parts[tag_column])
            except IndexError:
                raise UserError(f"{path}:{number}: no column {tag_column} in "
                                f"{line.rstrip()!r}") from None
        words.append(parts[0])
        lines.append(number)
        if tags and len(tags) != len(words):
            raise UserError(f"{path}:{number}: tokens with and without a tag in one "
                            f"sentence (at {line.rstrip()!r})")
    if words:
        sentences.append(sentence())
    return sentences


def write_jsonl(path: str, records: Iterable[dict[str, Any]]) -> None:
    paths.makedirs(paths.dirname(paths.abspath(path)))
    paths.write_text(path, "".join(json.dumps(record, ensure_ascii=False) + "\n"
                                   for record in records))


def tfds_examples(name: str, split: str, *, data_dir: str | None = None,
                  download: bool = False, otherwise: str = "") -> list[dict[str, Any]]:
    """All examples of a tensorflow-datasets split as numpy dicts (strings as bytes).

    Without `download` a data set that is not prepared fails at once with a message,
    instead of tfds retrying the network for minutes; `otherwise` ends it with the
    task's other source ("or read ..."). Without TensorFlow a prepared split is still read
    (`_prepared_examples`); downloading and preparing need it.
    """
    import tensorflow_datasets as tfds

    from bert_jax.host import tf_host
    if not tf_host.installed() and not download:
        return _prepared_examples(name, split, data_dir, otherwise)
    tf_host.tensorflow(f"preparing the tensorflow-datasets data set {name!r}" if download
                       else f"the tensorflow-datasets data set {name!r}")
    try:
        ds = tfds.load(name, split=split, data_dir=data_dir or None, download=download)
    except (AssertionError, tfds.core.registered.DatasetNotFoundError, OSError) as e:
        full_text = library_log.keep(e, f"tfds.load({name!r}, split={split!r})")
        raise _not_prepared(name, split, data_dir, otherwise, full_text) from None
    return list(tfds.as_numpy(ds))


def _not_prepared(name: str, split: str, data_dir: str | None, otherwise: str,
                  full_text: str = "") -> UserError:
    where = data_dir or os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"
    return UserError(
        f"the data set {name!r} (split {split!r}) must be downloaded or prepared first: it "
        f"is not in {where}. With network access, rerun with --config.tfds_download=true "
        f"or run `tfds build {name}`; or point --config.tfds_data_dir at a prepared copy"
        f"{'; ' + otherwise if otherwise else ''}{full_text}")


def _prepared_examples(name: str, split: str, data_dir: str | None,
                       otherwise: str) -> list[dict[str, Any]]:
    """A prepared split read without TensorFlow, as `tfds.load` reads it (its shards in order).

    Each TFRecord shard's records (bert_jax's reader, CRCs checked) decoded by the data set's
    own features (tfds' numpy decoder)."""
    import itertools

    import tensorflow_datasets as tfds

    from bert_jax.data import tfrecord
    needs = "preparing it needs TensorFlow: pip install 'bert_jax[tf]'"
    try:
        builder = tfds.builder(name, data_dir=data_dir or None)
        splits = builder.info.splits
    except (AssertionError, tfds.core.registered.DatasetNotFoundError, OSError):
        splits = {}
    if not splits:
        raise _not_prepared(name, split, data_dir, "; ".join(filter(None, [otherwise, needs])))
    try:
        instructions = splits[split].file_instructions
    except (KeyError, ValueError):
        raise UserError(f"the data set {name!r} has no split {split!r} (it has "
                        f"{', '.join(sorted(splits))})") from None
    if builder.info.file_format != tfds.core.file_adapters.FileFormat.TFRECORD:
        raise UserError(f"the data set {name!r} is prepared as {builder.info.file_format.value}"
                        ", which bert_jax reads only through TensorFlow: pip install "
                        "'bert_jax[tf]'")
    decode = builder.info.features.deserialize_example_np
    return [decode(record) for f in instructions for record in itertools.islice(
        tfrecord.read_records(f.filename), f.skip, f.skip + f.take)]


def text(value) -> str:
    """tfds strings arrive as bytes."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
