"""The heads a saved model can carry, by kind, and the record of one in a model's task.

A model directory's task record (`bert_jax.json`'s "task") names its head: "kind" (a key of
`HEADS`) and "head" (`Head`'s settings). Export, conversion to Hugging Face and the NNX
bridge look the kind up here: which parameter entry holds the head, the linen module that
runs it, what a serving function returns, transformers' class for it. Nothing guesses the
head back from parameter names, except the one reader of records written before the head
was recorded (`bert_jax.weights.pretrained.task_head`).

The fine-tuning tasks (`bert_jax.finetune.tasks`) each say which head they train
(`Task.head`); a new kind of head is one `register_head` call.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.errors import UserError
from bert_jax.models import heads
from bert_jax.models.config import BertConfig
from bert_jax.models.encoder import mean_pool

Array = jax.Array

ENCODER = "encoder"  # no task head: the bare encoder (and whatever pretraining heads it has)


@dataclasses.dataclass(frozen=True)
class Head:
    """A model's head: its kind, the width of its output layer and the pooling a classifier reads.

    The kind is a key of HEADS; the width is `num_labels`: the classes, 1 for a regression or for
    each row of multiple choice, 2 for a span's start and end; None for the bare encoder. The
    pooling is the one a sequence classifier reads (one of `heads.CLASSIFIER_POOLINGS`; None for
    other heads)."""

    kind: str
    num_labels: int | None = None
    pooling: str | None = None

    def record(self) -> dict[str, Any]:
        """The entries a task record stores: {"kind": ..., "head": {settings}}."""
        settings = {"num_labels": self.num_labels, "pooling": self.pooling}
        return {"kind": self.kind, "head": {k: v for k, v in settings.items() if v is not None}}

    @classmethod
    def from_record(cls, task: dict[str, Any] | None) -> Head | None:
        """The head a task record states; None for a record without one.

        Such a record was written before heads were recorded, or by a conversion that could not
        tell."""
        if not task or "head" not in task:
            return None
        return cls(task["kind"], **task["head"])

    @property
    def entry(self) -> HeadKind:
        """What HEADS knows of its kind.

        An unknown kind, as a newer release may record, raises a UserError naming the known ones."""
        if self.kind not in HEADS:
            raise UserError(f"the model's head is of kind {self.kind!r}, which this bert_jax "
                            f"does not know (it knows {', '.join(sorted(HEADS))})")
        return HEADS[self.kind]


@dataclasses.dataclass(frozen=True)
class HeadKind:
    """What every reader of a saved model needs to know about one kind of head.

    param: the top-level parameter entry holding it (None: no head). keeps_pooler: the
    encoder under it keeps its pooler (so does transformers' class). module(config, head):
    the linen model with this head, for serving and the NNX bridge (None: not built outside
    its task). outputs: what a serving function returns ({name: "dtype [shape]"}; B batch,
    L length, C labels, H hidden size) and serve(raw, input_mask) computes it from the
    module's output (None: not exported, `not_served` says why). tags_words: a served model
    also tags the words of raw text. classifies_sequences: the module is
    `heads.BertForSequenceClassification` (the NNX bridge may keep a saved head). hf_class:
    transformers' BERT class holding exactly this head (None: the encoder's own heads
    decide), hf_labels: its config.json names the labels, hf_problem_type: and its
    problem_type."""

    name: str
    param: str | None
    keeps_pooler: bool
    hf_class: str | None
    module: Callable[[BertConfig, Head], nn.Module] | None = None
    outputs: dict[str, str] = dataclasses.field(default_factory=dict)
    serve: Callable[[Any, Array], dict[str, Array]] | None = None
    not_served: str | None = None
    tags_words: bool = False
    classifies_sequences: bool = False
    hf_labels: bool = False
    hf_problem_type: str | None = None


HEADS: dict[str, HeadKind] = {}


def register_head(kind: HeadKind) -> HeadKind:
    """Adds a kind of head to HEADS (by its name)."""
    HEADS[kind.name] = kind
    return kind


def _label_ids(logits: Array) -> Array:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def _encoder_outputs(raw, input_mask):
    out = {"sequence_output": raw.sequence_output,
           "mean_embedding": mean_pool(raw.sequence_output, input_mask)}
    if raw.pooled_output is not None:
        out["pooled_output"] = raw.pooled_output
    return out


def _sequence_classifier(config: BertConfig, head: Head) -> nn.Module:
    return heads.BertForSequenceClassification(config, head.num_labels,
                                               head.pooling or "pooler")


register_head(HeadKind(
    "classification", "classifier", keeps_pooler=True, hf_class="BertForSequenceClassification",
    module=_sequence_classifier,
    outputs={"logits": "float32 [B, C]", "probabilities": "float32 [B, C]",
             "label_ids": "int32 [B]"},
    serve=lambda raw, _: {"logits": raw, "probabilities": jax.nn.softmax(raw, axis=-1),
                          "label_ids": _label_ids(raw)},
    classifies_sequences=True, hf_labels=True, hf_problem_type="single_label_classification"))
register_head(HeadKind(
    "regression", "classifier", keeps_pooler=True, hf_class="BertForSequenceClassification",
    module=_sequence_classifier, outputs={"predictions": "float32 [B]"},
    serve=lambda raw, _: {"predictions": raw[:, 0]},
    classifies_sequences=True, hf_labels=True, hf_problem_type="regression"))
register_head(HeadKind(
    "tagging", "classifier", keeps_pooler=False, hf_class="BertForTokenClassification",
    module=lambda config, head: heads.BertForTokenClassification(config, head.num_labels),
    outputs={"logits": "float32 [B, L, C]", "label_ids": "int32 [B, L]"},
    serve=lambda raw, _: {"logits": raw, "label_ids": _label_ids(raw)},
    tags_words=True, hf_labels=True))
# transformers has no CRF: its token classifier holds the emissions (decoded by argmax).
register_head(HeadKind(
    "crf_tagging", "classifier", keeps_pooler=False, hf_class="BertForTokenClassification",
    not_served="exporting a CRF tagging head is not supported yet (its Viterbi decoding "
               "needs word boundaries); export the emissions by removing the crf_* "
               "parameters",
    hf_labels=True))
register_head(HeadKind(
    "span", "qa_outputs", keeps_pooler=False, hf_class="BertForQuestionAnswering",
    module=lambda config, head: heads.BertForQuestionAnswering(config),
    outputs={"start_logits": "float32 [B, L]", "end_logits": "float32 [B, L]"},
    serve=lambda raw, _: {"start_logits": raw[0], "end_logits": raw[1]}))
register_head(HeadKind(
    "multiple_choice", "classifier", keeps_pooler=True, hf_class="BertForMultipleChoice",
    module=lambda config, head: heads.BertForMultipleChoice(config)))
register_head(HeadKind(
    ENCODER, None, keeps_pooler=True, hf_class=None,
    outputs={"sequence_output": "float32 [B, L, H]", "pooled_output": "float32 [B, H]",
             "mean_embedding": "float32 [B, H] (masked mean of sequence_output)"},
    serve=_encoder_outputs))
