"""Multiple choice (SWAG and the like): which of C endings follows a context.

Each ending is scored on its own row `[CLS] context [SEP] question + " " + ending [SEP]`
(the question, SWAG's `sent2`, is the shared start of every ending); a softmax over
the C rows' scores picks one. Features are C sequences ([C, L], batched to [B, C, L]).

Files are CSV, TSV or JSONL (by extension), SWAG's layout by default. Config keys:
`context_column` (sent1), `question_column` (sent2; "" for none), `ending_columns`
(ending0,...,ending3: one column per ending, or one column holding a list of endings,
as JSONL can), `label_column` (label: the index of the right ending, 0-based).
Examples are dicts {'context', 'question' (or None), 'endings', 'label' (or None), 'idx'}.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune import files
from bert_jax.finetune.tasks import metrics
from bert_jax.finetune.tasks.base import Task, check_column_roles, check_known_labels, register
from bert_jax.models import losses, task_heads
from bert_jax.tokenization.text_io import encode_pair, head_fraction

_SPLIT_KEYS = {"train": "train_file", "validation": "validation_file", "test": "test_file"}


def column_names(value) -> list[str]:
    """`ending_columns` as names: a comma-separated string or a list.

    A string such as "a,b,c" (the config loader may hand over "('a', 'b')") or a list."""
    names = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = [str(n).strip(" ()[]'\"") for n in names]
    names = [n for n in names if n]
    if not names or len(set(names)) != len(names):
        raise UserError(f"ending_columns must name distinct columns, e.g. "
                        f"'ending0,ending1,ending2,ending3' or one list column 'endings'; "
                        f"got {value!r}")
    return names


def _text(value, where: str, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise UserError(f"{where}: {what} must be a text, got {value!r:.80}")


def _label(value, num_choices: int, where: str) -> int | None:
    """The index of the right ending; None for a blank cell, null or -1 (unlabeled)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise UserError(f"{where}: label {value!r} is not an ending index "
                            f"(0..{num_choices - 1})") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{where}: label {value!r} is not an ending index "
                        f"(0..{num_choices - 1})")
    if value == -1:  # how HF's SWAG marks its unlabeled test split
        return None
    if not 0 <= value < num_choices:
        raise UserError(f"{where}: label {value} is out of range for {num_choices} endings "
                        f"(0..{num_choices - 1})")
    return value


class MultipleChoiceTask(Task):
    name = "multiple_choice"
    supports_packing = False  # a feature is C rows; packing shares one row between features

    def __init__(self, config):
        super().__init__(config)
        head_fraction(config.truncation)  # an unknown one fails now
        self.context_column = config.context_column
        self.question_column = config.question_column or None
        self.ending_columns = column_names(config.ending_columns)
        self.label_column = config.label_column
        check_column_roles({"context_column": self.context_column,
                            "question_column": self.question_column,
                            "ending_columns": self.ending_columns,
                            "label_column": self.label_column})
        self.num_choices: int | None = None  # the training examples' number of endings

    def head(self):
        return task_heads.Head("multiple_choice", 1)  # a score per choice

    def spec(self):
        return {**super().spec(), "family": "multiple_choice", "num_choices": self.num_choices}

    def restore_spec(self, spec):
        self.num_choices = spec.get("num_choices")  # (older models saved none: unchecked)

    def prepare(self, train_examples):
        self.num_choices = len(train_examples[0]["endings"]) if train_examples else None

    def check_labels(self, examples):
        """Refuses a label (an ending index) past the training's endings (`base.unseen_label`)."""
        if self.num_choices is not None:
            check_known_labels(((ex.get("label"), files.where(ex)) for ex in examples),
                               list(range(self.num_choices)))

    @property
    def test_split(self):
        return "test" if self.config.test_file else None

    # --- data ---
    def load(self, split):
        key = _SPLIT_KEYS[split]
        path = self.config[key]
        if not path:
            raise UserError(f"task {self.name!r} needs --config.{key}")
        # Train and validation need every label; a test file may have none or blanks.
        return self._read(path, labels="optional" if split == "test" else "required")

    def read_inputs(self, path):
        if files.table_format(path) == "jsonl":  # docs/finetuning.md's predict format
            rows, columns = files.read_table(path)
            if "context" in columns and "endings" in columns:
                return self.examples_from_inputs(
                    [{k: row.get(k) for k in ("context", "endings", "question")} for row in rows])
        return self._read(path, labels="ignored")

    def _read(self, path: str, labels: str) -> list[dict]:
        if files.table_format(path) == "text":
            raise UserError(f"{path}: multiple choice reads CSV, TSV or JSONL files (by "
                            "extension), with a header line for CSV/TSV")
        rows, columns = files.read_table(path)
        if not rows:
            raise UserError(f"{path} has no rows")
        trained = [c for c in (self.context_column, self.question_column, *self.ending_columns)
                   if c]
        if labels == "ignored" and any(c not in columns for c in trained):
            raise UserError(f"{path} has the columns {', '.join(map(repr, columns))}: predict "
                            'reads JSONL rows {"context": ..., "endings": [...], "question": '
                            f"...}} or the columns the model was trained with "
                            f"({', '.join(map(repr, trained))})")
        contexts = files.column(rows, columns, self.context_column, path, "context")
        questions = (files.column(rows, columns, self.question_column, path, "question")
                     if self.question_column else [None] * len(rows))
        endings = self._endings(rows, columns, path)
        if labels == "ignored" or (labels == "optional" and self.label_column not in columns):
            gold = [None] * len(rows)
        else:
            gold = files.column(rows, columns, self.label_column, path, "label")
        examples = []
        for i, (row, context, question, ends, label) in enumerate(
                zip(rows, contexts, questions, endings, gold)):
            where = f"{path}:{getattr(row, 'line', i + 1)}"
            label = _label(label, len(ends), where)
            if label is None and labels == "required":
                raise UserError(f"{where}: no label (column {self.label_column!r}); every "
                                "training and validation row needs the index of its right "
                                "ending")
            examples.append(files.Row({
                "context": _text(context, where, f"context column {self.context_column!r}"),
                "question": None if question is None else _text(
                    question, where, f"question column {self.question_column!r}"),
                "endings": ends, "label": label, "idx": i}, getattr(row, "line", i + 1), path))
        return examples

    def _endings(self, rows, columns, path) -> list[list[str]]:
        names = self.ending_columns
        missing = [n for n in names if n not in columns]
        if missing:
            raise UserError(f"{path} has no ending column {', '.join(map(repr, missing))}; its "
                            f"columns are: {', '.join(map(repr, columns))} (set "
                            "--config.ending_columns)")
        out = []
        for i, row in enumerate(rows):
            where = f"{path}:{getattr(row, 'line', i + 1)}"
            values = row[names[0]] if len(names) == 1 else [row[n] for n in names]
            if not isinstance(values, list):
                raise UserError(f"{where}: ending column {names[0]!r} must hold a list of "
                                f"endings (JSONL), got {values!r:.80}; or name one column per "
                                "ending in --config.ending_columns")
            if len(values) < 2:
                raise UserError(f"{where}: {len(values)} ending(s); multiple choice needs at "
                                "least 2")
            if out and len(values) != len(out[0]):
                raise UserError(f"{where}: {len(values)} endings, but the first row has "
                                f"{len(out[0])}; every row needs the same number")
            out.append([_text(v, where, "an ending") for v in values])
        return out

    def examples_from_inputs(self, inputs):
        examples = []
        for i, item in enumerate(inputs):
            if not (isinstance(item, dict) and isinstance(item.get("context"), str)
                    and isinstance(item.get("endings"), (list, tuple))
                    and all(isinstance(e, str) for e in item["endings"])
                    and isinstance(item.get("question") or "", str)):
                raise UserError(f"input {i}: expected a dict with 'context' (a text), "
                                f"'endings' (a list of texts) and optionally 'question'; got "
                                f"{item!r:.80}")
            examples.append({"context": item["context"], "question": item.get("question"),
                             "endings": list(item["endings"]), "label": None, "idx": i})
        return examples

    def featurize(self, examples, tokenizer, max_seq_length, *, training):
        counts = sorted({len(ex["endings"]) for ex in examples})
        if len(counts) > 1:
            raise UserError(f"examples with {' and '.join(map(str, counts))} endings: every "
                            "example of one set needs the same number")
        if not training:
            self.check_labels(examples)
        truncation = self.config.truncation
        features = []
        for i, ex in enumerate(examples):
            rows = [encode_pair(tokenizer, ex["context"],
                                f"{ex['question']} {ending}" if ex["question"] else ending,
                                max_seq_length, truncation) for ending in ex["endings"]]
            features.append({"input_ids": [ids for ids, _ in rows],
                             "segment_ids": [segments for _, segments in rows],
                             "feature_index": i, "label": ex["label"] or 0})
        return features

    # --- model ---
    def model_inputs(self, batch):
        return {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}

    def loss(self, outputs, batch):
        labels, weights = batch["label"], batch["example_weights"]
        return {"loss": losses.weighted_cross_entropy(outputs, labels, weights),
                "accuracy": losses.weighted_accuracy(outputs, labels, weights)}

    def soft_loss(self, student, teacher, batch, temperature):
        """KL between the distributions over each example's choices."""
        return losses.distillation_kl(student, teacher, temperature, batch["example_weights"])

    def eval_outputs(self, outputs, batch):
        return {"probabilities": jax.nn.softmax(outputs.astype(jnp.float32), axis=-1)}

    # --- results ---
    def evaluate(self, examples, features, outputs):
        predicted = [int(np.argmax(o["probabilities"])) for o in outputs]
        return metrics.accuracy(predicted, [ex["label"] for ex in examples])

    def predict(self, examples, features, outputs):
        records = []
        for ex, out in zip(examples, outputs):
            choice = int(np.argmax(out["probabilities"]))
            records.append({"idx": ex["idx"], "label": choice, "ending": ex["endings"][choice],
                            "probabilities": [round(float(p), 6) for p in out["probabilities"]]})
        return records


register("multiple_choice")(MultipleChoiceTask)
