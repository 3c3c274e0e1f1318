"""The pretraining objective as pure, jitted steps: the loss terms of a batch (MLM and
NSP, and the soft loss of a distillation teacher), one optimizer update over a sharded
TrainState, and held-out evaluation. No files, no workdir: `pretrain` runs these, `bert-jax
compile` compiles them for a TPU topology, the benchmarks time them."""

from __future__ import annotations

import functools
from typing import Any, Iterator

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import losses, matching
from bert_jax.models.heads import BertForPreTraining
from bert_jax.pretrain import distill
from bert_jax.train import train_step
from bert_jax.train.sharding import Partitioner
from bert_jax.train.train_state import TrainState

# The model's optional inputs, passed through when the batch has them (packed rows).
_OPTIONAL_INPUTS = ("position_ids", "example_ids", "next_sentence_positions")


def dummy_inputs(batch_size: int, seq_length: int, num_predictions: int) -> tuple:
    ids = jnp.zeros((batch_size, seq_length), jnp.int32)
    return ids, ids, ids, jnp.zeros((batch_size, num_predictions), jnp.int32)


def forward(model: nn.Module, params: Any, batch: dict, *, rng=None,
            teacher: distill.MlmTeacher | None = None,
            teacher_params: Any = None) -> dict:
    """The loss terms of one batch, {name: (weighted sum, weight)}
    (`losses.pretraining_loss`); dropout on when `rng` is given.
    teacher: distil its MLM logits (`bert_jax.pretrain.distill`), `soft_loss` beside
    `mlm_loss`, and its states (`hidden_loss`, `attention_loss`) when it matches them."""
    extra = {k: batch[k] for k in _OPTIONAL_INPUTS if k in batch}
    capture = teacher.capture if teacher is not None else {}
    out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                      batch["segment_ids"], batch["masked_lm_positions"], **extra,
                      deterministic=rng is None, rngs={"dropout": rng} if rng is not None else {},
                      **capture)
    out, captured = out if capture else (out, None)
    terms = losses.pretraining_loss(out.mlm_logits, out.nsp_logits, batch)
    if teacher is not None:
        states = None if captured is None else \
            matching.captured_states(captured["intermediates"], model.config)
        terms.update(teacher.loss_terms(teacher_params, batch, out.mlm_logits, states,
                                        params.get(matching.PROJECTION)))
    return terms


def loss_coefficients(model: BertForPreTraining,
                      teacher: distill.MlmTeacher | None = None) -> dict[str, float]:
    """The training loss as a sum of `forward`'s term means: MLM (mixed with the soft
    loss when distilling) plus NSP when the model has the head."""
    mlm = {"mlm_loss": 1.0} if teacher is None else teacher.coefficients()
    return {**mlm, **({"nsp_loss": 1.0} if model.next_sentence_prediction else {})}


def loss_terms(params: Any, batch: dict, teacher_params: Any, dropout_key: jax.Array, *,
               model: nn.Module, rules: tuple,
               teacher: distill.MlmTeacher | None = None) -> dict:
    """`forward`'s terms with dropout under the run's axis rules: the loss that
    `train_step.train_step` minimises (distilling `teacher`, whose parameters are
    `teacher_params`, when given)."""
    with nn.logical_axis_rules(rules):
        return forward(model, params, batch, rng=dropout_key, teacher=teacher,
                       teacher_params=teacher_params)


def eval_step(params: Any, batch: dict, *, model: nn.Module, rules: tuple) -> dict:
    """Weighted sums over one batch (combine across batches, then divide): MLM and (for
    NSP models) NSP loss sums, correct counts and counts. All-zero padding rows count
    for nothing."""
    extra = {k: batch[k] for k in _OPTIONAL_INPUTS if k in batch}
    with nn.logical_axis_rules(rules):
        out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                          batch["segment_ids"], batch["masked_lm_positions"], **extra,
                          deterministic=True)
    heads = [("mlm", out.mlm_logits, batch["masked_lm_ids"], batch["masked_lm_weights"])]
    if out.nsp_logits is not None:
        heads.append(("nsp", out.nsp_logits, batch["next_sentence_labels"], batch.get(
            "next_sentence_weights", (batch["input_mask"][:, 0] > 0).astype(jnp.float32))))
    sums = {}
    for name, logits, labels, weights in heads:
        loss, count = losses.weighted_cross_entropy(logits, labels, weights)
        correct, _ = losses.weighted_accuracy(logits, labels, weights)
        sums.update({f"{name}_loss_sum": loss, f"{name}_correct": correct,
                     f"{name}_count": count})
    return sums


def jit_steps(model: nn.Module, tx, partitioner: Partitioner, shardings: TrainState,
              grad_accum_steps: int = 1, teacher: distill.MlmTeacher | None = None,
              teacher_shardings: Any = None):
    """(train_step, eval_step) jitted once with explicit shardings; the state is donated.
    train_step is `train_step.train_step` of `loss_terms`; with a teacher it takes
    the teacher's parameters as a third argument."""
    rules = partitioner.rules
    loss_fn = functools.partial(loss_terms, model=model, rules=rules, teacher=teacher)
    train = train_step.jit_train_step(loss_fn, loss_coefficients(model, teacher), tx, shardings,
                                      partitioner, grad_accum_steps=grad_accum_steps,
                                      extra_shardings=teacher_shardings if teacher else None)
    batch, replicated = partitioner.batch_sharding, partitioner.replicated
    evaluate = jax.jit(functools.partial(eval_step, model=model, rules=rules),
                       in_shardings=(shardings.params, batch), out_shardings=replicated)
    return train, evaluate


def evaluate(eval_fn, params, batches: Iterator[dict], partitioner: Partitioner,
             max_steps: int, disc_weight: float = 0.0) -> dict:
    """Held-out MLM (and NSP, or ELECTRA's discriminator) loss and accuracy over up to
    `max_steps` batches; `loss` weighs the discriminator's by `disc_weight`."""
    totals = None
    for i, batch in enumerate(batches):
        if i >= max_steps:
            break
        sums = eval_fn(params, partitioner.global_batch(batch))
        totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
    if totals is None:
        return {}
    t = jax.device_get(totals)
    out = {}
    for name in ("mlm", "nsp", "disc"):
        if f"{name}_count" in t:
            count = max(float(t[f"{name}_count"]), 1e-9)
            out[f"{name}_loss"] = float(t[f"{name}_loss_sum"]) / count
            out[f"{name}_accuracy"] = float(t[f"{name}_correct"]) / count
    if "disc_replaced" in t:
        out["replaced"] = float(t["disc_replaced"]) / max(float(t["disc_count"]), 1e-9)
    out["loss"] = (out["mlm_loss"] + out.get("nsp_loss", 0.0)
                   + disc_weight * out.get("disc_loss", 0.0))
    return out
