"""Sequence classification and regression over single texts or pairs.

The family of the GLUE tasks and of custom CSV/TSV/JSONL files.

Examples are dicts {'text_a', 'text_b' (or None), 'label' (class index, float or
None), 'idx'}. Features are `[CLS] a [SEP] (b [SEP])`, pairs truncated longest-first
(`truncation`: each cut text keeps its start, or its start and end).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune import files
from bert_jax.finetune.tasks import metrics
from bert_jax.finetune.tasks.base import Task
from bert_jax.models import heads, losses, task_heads
from bert_jax.models.config import check_choice
from bert_jax.tokenization.text_io import encode_pair, head_fraction


class ClassificationTask(Task):
    """`label_names` None means regression (one output, MSE loss)."""

    supports_packing = True

    def __init__(self, config, *, name: str, label_names: list[str] | None,
                 metric: str = "accuracy"):
        super().__init__(config)
        self.name = name
        self.label_names = label_names
        self.metric = metric
        head_fraction(config.truncation)  # an unknown one fails now
        self.pooling = config.pooling
        check_choice("pooling", self.pooling, heads.CLASSIFIER_POOLINGS)
        self.selection_metric = {"matthews": "matthews_corrcoef", "f1_accuracy": "f1",
                                 "pearson_spearman": "pearson", "regression": "pearson"
                                 }.get(metric, "accuracy")

    # Columns `bert-jax predict` looks for in a table, besides 'text'/'text_pair'.
    text_columns: tuple[str, str | None] = ("text", None)

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        return 1 if self.is_regression else len(self.label_names)

    def head(self):
        return task_heads.Head("regression" if self.is_regression else "classification",
                               self.num_labels, self.pooling)

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "family": "classification", "label_names": self.label_names,
                "num_labels": self.num_labels, "metric": self.metric}

    def restore_spec(self, spec: dict[str, Any]) -> None:
        self.label_names = spec["label_names"]
        self.metric = spec.get("metric", self.metric)

    def is_labeled(self, example):
        label = example.get("label")
        # GLUE test splits mark missing labels with -1.
        return label is not None and label != "" and not (
            not self.is_regression and isinstance(label, int) and label < 0)

    def featurize(self, examples, tokenizer, max_seq_length, *, training):
        features = []
        for i, ex in enumerate(examples):
            ids, segments = encode_pair(tokenizer, ex["text_a"], ex.get("text_b"),
                                        max_seq_length, self.config.truncation)
            label = ex.get("label")
            if label is None or (not self.is_regression and label < 0):
                label = 0  # unlabeled (test) examples
            features.append({"input_ids": ids, "segment_ids": segments, "feature_index": i,
                             "label": np.float32(label) if self.is_regression else int(label)})
        return features

    def read_inputs(self, path: str):
        if path.lower().endswith((".conll", ".bio", ".iob")):
            raise self._not_classifiable(f"{path} is a CoNLL file (a token and its tag a "
                                         "line)")
        rows, columns = files.read_table(path)
        if self.text_columns[0] not in columns and "text" not in columns and (
                "tokens" in columns or "words" in columns):
            raise self._not_classifiable(f"{path} holds token lists (its columns: "
                                         f"{', '.join(map(repr, columns))})")
        a_name, b_name = self.text_columns
        a_name = a_name if a_name in columns else "text"
        if b_name not in columns:
            b_name = "text_pair" if "text_pair" in columns else None
        if files.table_format(path) == "text" and self.text_columns[1]:
            # Plain text for a pair task: one pair per line, separated by a tab.
            rows = [dict(zip(("text", "text_pair"), r["text"].split("\t", 1))) for r in rows]
            a_name, b_name = "text", "text_pair"
        texts_a = files.column(rows, list(rows[0]) if rows else columns, a_name, path, "text",
                               fix=f"name the column {a_name!r} in the file's header, or give "
                               "plain text, one input per line")
        texts_b = [r.get(b_name) for r in rows] if b_name else [None] * len(rows)
        return [{"text_a": str(a), "text_b": None if b is None else str(b), "label": None,
                 "idx": i} for i, (a, b) in enumerate(zip(texts_a, texts_b))]

    def _not_classifiable(self, what: str) -> UserError:
        """The refusal of an input file laid out for token tagging."""
        kind = ("a regression model" if self.is_regression else
                f"a text classification model (labels: {', '.join(self.label_names[:6])}"
                f"{', ...' if len(self.label_names) > 6 else ''})")
        return UserError(f"{self.model_name()} is {kind}; --input {what}, which a token "
                         f"tagging model reads: give it plain text, one input per line, or a "
                         f"table with a {self.text_columns[0]!r} column")

    def examples_from_inputs(self, inputs):
        takes_pairs = self.text_columns[1] is not None
        examples = []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                a, b = item, None
            elif (isinstance(item, (tuple, list)) and len(item) == 2
                  and all(isinstance(t, str) for t in item)):
                a, b = item
            else:
                raise UserError(f"input {i}: expected a text or a (text, text_pair) pair of "
                                f"strings, got {item!r:.80}")
            if takes_pairs != (b is not None):
                raise UserError(f"task {self.name!r} takes "
                                f"{'(text, text_pair) pairs' if takes_pairs else 'single texts'}"
                                f"; input {i} is {'a pair' if b is not None else 'one text'}")
            examples.append({"text_a": a, "text_b": b, "label": None, "idx": i})
        return examples

    def model_inputs(self, batch):
        inputs = super().model_inputs(batch)
        if "cls_positions" in batch:  # packed rows
            inputs["cls_positions"] = batch["cls_positions"]
        return inputs

    def loss(self, outputs, batch):
        weights = batch["example_weights"]
        if self.is_regression:
            return {"loss": losses.regression_loss(outputs[..., 0], batch["label"], weights)}
        return {"loss": losses.weighted_cross_entropy(outputs, batch["label"], weights),
                "accuracy": losses.weighted_accuracy(outputs, batch["label"], weights)}

    def soft_loss(self, student, teacher, batch, temperature):
        """KL between the label distributions; a regression's MSE to the teacher's score."""
        weights = batch["example_weights"]
        if self.is_regression:
            return losses.regression_loss(student[..., 0], teacher[..., 0].astype(jnp.float32),
                                          weights)
        return losses.distillation_kl(student, teacher, temperature, weights)

    def eval_outputs(self, outputs, batch):
        if self.is_regression:
            return {"score": outputs[..., 0].astype(jnp.float32)}
        return {"probabilities": jax.nn.softmax(outputs.astype(jnp.float32), axis=-1)}

    def _predicted(self, outputs):
        if self.is_regression:
            return np.array([o["score"] for o in outputs], np.float32)
        return np.array([int(np.argmax(o["probabilities"])) for o in outputs])

    def evaluate(self, examples, features, outputs):
        labels = [ex["label"] for ex in examples]
        return metrics.METRICS[self.metric](self._predicted(outputs), labels)

    def predict(self, examples, features, outputs):
        records = []
        for ex, out in zip(examples, outputs):
            record = {"idx": ex.get("idx"), "text": ex["text_a"]}
            if ex.get("text_b") is not None:
                record["text_pair"] = ex["text_b"]
            if self.is_regression:
                record["score"] = float(out["score"])
            else:
                probs = out["probabilities"]
                record["label"] = self.label_names[int(np.argmax(probs))]
                record["probabilities"] = {n: round(float(p), 6)
                                           for n, p in zip(self.label_names, probs)}
            records.append(record)
        return records
