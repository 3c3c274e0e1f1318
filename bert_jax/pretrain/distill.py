"""Pretraining distillation (`--config.teacher=MODEL_DIR_OR_WORKDIR`).

The student learns a pretrained teacher's masked-LM distributions (DistilBERT, Sanh et al. 2019)
and, with `hidden_weight` / `attention_weight`, its hidden states and attention maps layer by layer
(TinyBERT's general distillation, Jiao et al. 2020). The pretraining loss becomes

    alpha * MLM cross-entropy + (1 - alpha) * T^2 * KL(teacher / T || student / T)
    + hidden_weight * hidden-state MSE + attention_weight * attention-map MSE
    (+ the NSP loss when the student has an NSP head)

with the KL averaged over the masked positions and the MSEs over the real tokens and
the layers, student layer m matched to teacher layer m * N / M and the embeddings to the
embeddings (`losses.matching_losses`). The teacher is any pretrained BERT with a
masked-LM head reading the run's vocabulary; its depth and width may differ from the
student's. A teacher without the head (a sentence encoder) teaches its hidden states and
attention maps alone: alpha = 1, no KL, only its encoder runs. A student of another
width learns the hidden states through a learned projection to the teacher's width
(`matching.StudentWithProjection`): a parameter of the run's state, checkpointed and
resumed with it, never part of the model the workdir gives to fine-tuning or export.
Attention maps are compared head by head: the head counts must be equal. The teacher
runs in eval mode inside the jitted train step, its parameters a non-trained input
sharded like the student's, so a resumed run sees exactly the teacher outputs an
uninterrupted one does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.errors import UserError
from bert_jax.models import losses, matching
from bert_jax.models.config import BertConfig, check_inputs_fit
from bert_jax.models.heads import BertForPreTraining
from bert_jax.pretrain.steps import BertPretraining, apply_model
from bert_jax.train import sharding
from bert_jax.train.model_config import run_bert_config
from bert_jax.weights import pretrained

# The packed-row inputs the teacher needs (it has no NSP head).
_TEACHER_INPUTS = ("position_ids", "example_ids")


@dataclasses.dataclass(frozen=True)
class MlmTeacher:
    """The teacher's module and the loss settings (static parts of the train step)."""

    model: BertForPreTraining
    temperature: float
    alpha: float
    hidden_weight: float = 0.0
    attention_weight: float = 0.0
    mlm_head: bool = True  # False: an encoder-only teacher, no soft loss

    @property
    def capture(self) -> dict:
        """Keywords of the student's `apply` that also return the states matching reads.

        The states are `matching.CAPTURE`; {} when it matches none."""
        return matching.CAPTURE if self.hidden_weight > 0 or self.attention_weight > 0 else {}

    def loss_terms(self, params, batch: dict, student_logits: jax.Array,
                   student_states: tuple | None = None, projection: dict | None = None) -> dict:
        """{name: (sum, weight)}: `soft_loss` and the `losses.matching_losses` asked for.

        `soft_loss` is the T^2-scaled KL from the teacher's to the student's MLM distributions over
        `masked_lm_weights` (the positions the hard loss covers). student_logits [B, P, V];
        student_states: `matching.captured_states` of the student (when `capture`); projection: its
        parameters (a student of another width)."""
        extra = {k: batch[k] for k in _TEACHER_INPUTS if k in batch}
        if self.mlm_head:
            out = self.model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                                   batch["segment_ids"], batch["masked_lm_positions"], **extra,
                                   deterministic=True, **self.capture)
        else:
            out = self.model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                                   batch["segment_ids"], **extra, deterministic=True,
                                   method=_encoder, **self.capture)
        out, captured = out if self.capture else (out, None)
        terms = {} if not self.mlm_head else {"soft_loss": losses.distillation_kl(
            student_logits, jax.lax.stop_gradient(out.mlm_logits), self.temperature,
            batch["masked_lm_weights"])}
        if captured is not None:
            teacher_states = jax.lax.stop_gradient(
                matching.captured_states(captured["intermediates"], self.model.config))
            terms.update(losses.matching_losses(
                student_states, teacher_states, batch["input_mask"],
                hidden=self.hidden_weight > 0, attention=self.attention_weight > 0,
                project=matching.projector(projection)))
        return terms

    def coefficients(self) -> dict[str, float]:
        """The distillation part of the training loss (the module docstring's)."""
        out = {"mlm_loss": self.alpha, **({"soft_loss": 1 - self.alpha} if self.mlm_head
                                          else {})}
        for name, weight in (("hidden", self.hidden_weight),
                             ("attention", self.attention_weight)):
            if weight > 0:
                out[f"{name}_loss"] = weight
        return out

    def describe(self) -> str:
        """The settings, for the run's first message."""
        return f"T={self.temperature:g}, alpha={self.alpha:g}" + "".join(
            f", {name}={weight:g}" for name, weight in (("hidden_weight", self.hidden_weight),
                                                       ("attention_weight",
                                                        self.attention_weight)) if weight > 0)


@dataclasses.dataclass(frozen=True)
class MlmDistillation:
    """Pretraining distillation as an objective (`train.objective.Objective`).

    The student's BERT objective (`steps.BertPretraining`) with the `teacher`'s terms beside its own
    (the module docstring's loss). extra: the teacher's parameters, a step input placed with
    `extra_shardings`. Evaluated as the student's objective is (the teacher does not run)."""

    student: BertPretraining
    teacher: MlmTeacher
    extra: Any
    extra_shardings: Any

    @property
    def coefficients(self) -> dict[str, float]:
        nsp = {"nsp_loss": 1.0} if self.student.model.next_sentence_prediction else {}
        return {**self.teacher.coefficients(), **nsp}

    @property
    def eval_coefficients(self) -> dict[str, float]:
        return self.student.eval_coefficients

    def loss_terms(self, params, batch: dict, extra, dropout_key) -> dict:
        """The student's terms, then the teacher's; dropout on when `dropout_key` is given.

        The teacher's are `MlmTeacher.loss_terms`, of the teacher's parameters `extra`."""
        model = self.student.model
        with nn.logical_axis_rules(self.student.rules):
            out, captured = apply_model(model, params, batch, rng=dropout_key,
                                        capture=self.teacher.capture)
            terms = losses.pretraining_loss(out.mlm_logits, out.nsp_logits, batch)
            states = None if captured is None else \
                matching.captured_states(captured["intermediates"], model.config)
            terms.update(self.teacher.loss_terms(extra, batch, out.mlm_logits, states,
                                                 params.get(matching.PROJECTION)))
            return terms

    def eval_step(self, params, batch: dict) -> dict:
        return self.student.eval_step(params, batch)

    def models_beside(self, params) -> dict:
        return {}


def _encoder(model: BertForPreTraining, input_ids, input_mask, segment_ids, position_ids=None,
             example_ids=None, *, deterministic: bool = True):
    """`model`'s encoder alone (`Module.apply`'s `method`).

    The states of a teacher whose parameters have no `mlm` head, captured under the same `bert`
    path."""
    return model.bert(input_ids, input_mask, segment_ids, position_ids, example_ids,
                      deterministic=deterministic)


def _check_headless(config, path: str) -> None:
    """UserError unless a teacher without an MLM head has something to teach.

    That is alpha = 1 (its logits are not needed) and states to match."""
    if config.alpha < 1:
        raise UserError(f"teacher {path} has no masked-LM head, so alpha < 1 has no logits to "
                        "distil: set --config.alpha=1 and hidden_weight / attention_weight")
    if not (config.hidden_weight > 0 or config.attention_weight > 0):
        raise UserError(f"teacher {path} has no masked-LM head and hidden_weight = "
                        "attention_weight = 0: it would teach nothing")


def open_teacher(config) -> pretrained.ModelRef | None:
    """`config.teacher` resolved (None without one); reads no parameters."""
    if not config.teacher:
        return None
    try:
        return pretrained.open_model(config.teacher)
    except FileNotFoundError as e:
        raise UserError(f"teacher {config.teacher}: {e}") from None


def teacher_bert_config(config, teacher: pretrained.ModelRef) -> BertConfig:
    """The teacher as the run computes it.

    The run's numerics and layer layout, in eval mode (`run_bert_config`)."""
    return run_bert_config(config, teacher.config, remat_policy="none",
                           attention_probs_dropout_prob=0.0)


def init_model(model: BertForPreTraining, config, teacher: BertConfig | None) -> nn.Module:
    """The module whose `init` makes the run's parameters.

    `model`, wrapped with a projection to the teacher's width (`matching.StudentWithProjection`)
    when it learns the hidden states of a teacher of another width."""
    if teacher is None or not config.hidden_weight > 0 \
            or teacher.hidden_size == model.config.hidden_size:
        return model
    return matching.StudentWithProjection(model, teacher.hidden_size)


def load_distillation(config, teacher: pretrained.ModelRef, student: BertPretraining,
                      fingerprint: str, *, partitioner: sharding.Partitioner) -> MlmDistillation:
    """The objective of a pretraining run that distils `teacher` (`open_teacher`) into `student`.

    With the run's loss settings (checked with the config) and the teacher's parameters placed by
    `partitioner`. The teacher computes as `teacher_bert_config`; `fingerprint` is the run's
    tokenizer's, which the teacher's must equal; the student's vocabulary must fit the teacher's."""
    from bert_jax.tokenization import load_tokenizer
    path = config.teacher
    loaded = pretrained.load(teacher)
    mlm_head = "mlm" in loaded.params
    if not mlm_head:
        _check_headless(config, path)
    if load_tokenizer(loaded.tokenizer_dir).fingerprint() != fingerprint:
        raise UserError(f"vocabulary mismatch: the teacher {path} reads a different vocabulary "
                        "from this run's tokenizer; set --config.tokenizer to the teacher's")
    bert_config = teacher_bert_config(config, teacher)
    check_inputs_fit(bert_config, f"teacher {path}", max_seq_length=config.max_seq_length,
                     vocab_size=student.model.config.vocab_size)
    # A headless teacher teaches its states only: its other heads (an ELECTRA discriminator's)
    # are left out, and an encoder saved without a pooler (ELECTRA's) is built without one.
    encoder = loaded.params["bert"]
    model = BertForPreTraining(bert_config, next_sentence_prediction=False,
                               pooler=mlm_head or "pooler" in encoder)
    ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
    positions = jnp.zeros((1, config.max_predictions_per_seq), jnp.int32)
    inputs = (ids, ids, ids, positions) if mlm_head else (ids, ids, ids)
    method = {} if mlm_head else {"method": _encoder}
    boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), *inputs, **method)["params"])
    shardings = partitioner.shardings_of(nn.get_partition_spec(boxed))
    teacher_params = loaded.params if mlm_head else {"bert": encoder}
    params = pretrained.init_params(nn.unbox(boxed), teacher_params, shardings, drop=("nsp",),
                                    source=f"teacher {path}")
    settings = {k: float(config[k]) for k in ("temperature", "alpha", "hidden_weight",
                                              "attention_weight")}
    return MlmDistillation(student, MlmTeacher(model, **settings, mlm_head=mlm_head), params,
                           shardings)
