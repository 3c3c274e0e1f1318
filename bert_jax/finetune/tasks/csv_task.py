"""Custom classification and regression from CSV, TSV or JSONL files (by extension).

Config keys: `train_file`, `validation_file`, `test_file`, `text_column`,
`text_pair_column` (empty: single texts), `label_column`, `label_type` (`auto`,
`classification` or `regression`). With `auto`, labels that are all numbers with a
fraction are regression targets; anything else (strings, integers) names classes.
The `spam` task is `csv` over the small spam set shipped in `bert_jax/resources/spam`.

`columns` reads files without a header line, of any extension: e.g. `label,text`
for the usual Chinese `label<TAB>text` news and review files, or `text,label`.
Columns that look swapped (a "label" column of texts, a "text" column of a few
values) fail rather than train a model on the wrong column.
"""

from __future__ import annotations

import logging
import math

from bert_jax import RESOURCES
from bert_jax.errors import UserError
from bert_jax.finetune import files
from bert_jax.finetune.tasks.base import (
    check_column_roles,
    register,
    regression_target,
    unseen_label,
)
from bert_jax.finetune.tasks.classification import ClassificationTask
from bert_jax.host import paths

log = logging.getLogger(__name__)

SPAM_DIR = paths.join(RESOURCES, "spam")

_SPLIT_KEYS = {"train": "train_file", "validation": "validation_file", "test": "test_file"}


def _as_number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def infer_labels(values: list, label_type: str = "auto",
                 wheres: list[str | None] | None = None) -> list[str] | None:
    """Sorted class names from the training labels, or None for regression.

    `wheres` (each label's file:line) go into the messages: a regression label that is no
    number, or that is NaN or infinite (with `regression`, or in an `auto` column of numbers),
    fails naming its row."""
    if label_type not in ("auto", "classification", "regression"):
        raise UserError(f"label_type must be auto, classification or regression; "
                        f"got {label_type!r}")
    numbers = [_as_number(v) for v in values]
    numeric = all(n is not None for n in numbers)
    if label_type == "regression" or (label_type == "auto" and numeric):
        for value, where in zip(values, wheres or [None] * len(values)):
            regression_target(value, where)  # a word, NaN or an infinity fails here
    if label_type == "regression" or (
            label_type == "auto" and numeric and any(n != int(n) for n in numbers)):
        return None
    if numeric:
        return [_label_name(v) for v in sorted(set(numbers))]
    names = sorted({str(v) for v in values})
    if any(n is not None for n in numbers):  # "1", "5" and "five": likely one slip
        mixed = sorted({str(v) for v, n in zip(values, numbers) if n is not None})
        log.warning("the labels mix numbers (%s) and words (%s): each of the %d is its own "
                    "class; check the label column if that is not meant",
                    ", ".join(mixed[:5]), ", ".join(n for n in names if n not in mixed)[:200],
                    len(names))
    return names


def _column_names(spec: str) -> list[str]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise UserError(f"--config.columns={spec!r}: name each column of the file once, in "
                        "order, e.g. 'label,text' or 'text,label'")
    return names


def check_not_swapped(rows: list[dict], text_name: str, label_name: str, path: str) -> None:
    """Fails when the label column holds the texts and the text column the labels.

    That is, many distinct, long label values against a text column of at most 20 distinct
    values."""
    labels = {str(r[label_name]) for r in rows}
    texts = {str(r[text_name]) for r in rows}
    long_labels = sum(len(v) > 20 for v in labels)
    if len(texts) <= 20 and len(labels) > 20 and long_labels > len(labels) / 2:
        raise UserError(
            f"{path}: the columns look swapped: label column {label_name!r} holds "
            f"{len(labels)} distinct values, mostly long texts, while text column "
            f"{text_name!r} holds {len(texts)} ({', '.join(sorted(texts)[:5])}...); check "
            "--config.columns (e.g. 'label,text' versus 'text,label')")


def _label_name(value) -> str:
    """A class's name: integers as written without a fraction ('1.0' is '1')."""
    number = _as_number(value)
    if number is not None and math.isfinite(number) and number == int(number):
        return str(int(number))
    return str(value)


class CsvTask(ClassificationTask):
    def __init__(self, config, name: str = "csv"):
        super().__init__(config, name=name, label_names=[], metric=config.metric or "")
        pair = config.text_pair_column or None
        self.text_columns = (config.text_column, pair)
        check_column_roles({"text_column": config.text_column, "text_pair_column": pair,
                            "label_column": config.label_column})

    def path(self, split: str) -> str:
        path = self.config[_SPLIT_KEYS[split]]
        if not path and self.name == "spam":
            path = paths.join(SPAM_DIR, f"{'dev' if split == 'validation' else split}.tsv")
        return path

    @property
    def test_split(self):
        return "test" if self.path("test") else None

    def load(self, split):
        path = self.path(split)
        if not path:
            raise UserError(f"task {self.name!r} needs --config.{_SPLIT_KEYS[split]}")
        a_name, b_name = self.text_columns
        label_name = self.config.label_column
        if self.config.columns:
            columns = _column_names(self.config.columns)
            rows = files.read_headerless(path, columns)
        else:
            rows, columns = files.read_table(path)
            if (len(columns) == 2 and a_name not in columns and label_name not in columns
                    and files.table_format(path) != "jsonl"):
                try:
                    files.column(rows, columns, a_name, path, "text")
                except ValueError as e:
                    raise UserError(f"{e}; or, if the first line is not a header, set "
                                    "--config.columns=label,text (or text,label)") from None
        if not rows:
            raise UserError(f"{path} has no rows")
        texts_a = files.column(rows, columns, a_name, path, "text")
        texts_b = (files.column(rows, columns, b_name, path, "text_pair") if b_name
                   else [None] * len(rows))
        if split != "train" and label_name not in columns:
            labels = [None] * len(rows)  # an unlabeled test file
        else:
            # A labeled test file may leave some labels blank; train and validation may not.
            labels = files.labels(rows, columns, label_name, path, required=split != "test")
            check_not_swapped(rows, a_name, label_name, path)
        return [files.Row({"text_a": str(a), "text_b": None if b is None else str(b),
                           "label": y, "idx": i}, getattr(row, "line", i + 1), path)
                for i, (row, a, b, y) in enumerate(zip(rows, texts_a, texts_b, labels))]

    def prepare(self, train_examples):
        self.label_names = infer_labels([ex["label"] for ex in train_examples],
                                        self.config.label_type,
                                        [files.where(ex) for ex in train_examples])
        if not self.metric:
            self.metric = "regression" if self.is_regression else "accuracy"
        self.selection_metric = "pearson" if self.is_regression else "accuracy"

    def restore_spec(self, spec):
        super().restore_spec(spec)
        self.selection_metric = "pearson" if self.is_regression else "accuracy"

    def check_labels(self, examples):
        for example in examples:
            self._encode_label(example)

    def featurize(self, examples, tokenizer, max_seq_length, *, training):
        return super().featurize([self._encode_label(ex) for ex in examples], tokenizer,
                                 max_seq_length, training=training)

    def evaluate(self, examples, features, outputs):
        return super().evaluate([self._encode_label(ex) for ex in examples], features, outputs)

    def _encode_label(self, example):
        label = example["label"]
        if label is None or label == "":
            return {**example, "label": None}
        if self.is_regression:
            return {**example, "label": regression_target(label, files.where(example))}
        name = _label_name(label)
        if name not in self.label_names:
            raise unseen_label(label, self.label_names, files.where(example))
        return {**example, "label": self.label_names.index(name)}


register("csv")(lambda config: CsvTask(config, "csv"))
register("spam")(lambda config: CsvTask(config, "spam"))
