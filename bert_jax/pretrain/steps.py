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
import optax

from bert_jax import losses, sharding, training
from bert_jax.pretrain import distill
from bert_jax.heads import BertForPreTraining
from bert_jax.train_state import TrainState

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
    `mlm_loss`."""
    extra = {k: batch[k] for k in _OPTIONAL_INPUTS if k in batch}
    out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                      batch["segment_ids"], batch["masked_lm_positions"], **extra,
                      deterministic=rng is None, rngs={"dropout": rng} if rng is not None else {})
    terms = losses.pretraining_loss(out.mlm_logits, out.nsp_logits, batch)
    if teacher is not None:
        terms["soft_loss"] = teacher.soft_loss(teacher_params, out.mlm_logits, batch)
    return terms


def loss_coefficients(model: BertForPreTraining,
                      teacher: distill.MlmTeacher | None = None) -> dict[str, float]:
    """The training loss as a sum of `forward`'s term means: MLM (mixed with the soft
    loss when distilling) plus NSP when the model has the head."""
    mlm = {"mlm_loss": 1.0} if teacher is None else teacher.coefficients()
    return {**mlm, **({"nsp_loss": 1.0} if model.next_sentence_prediction else {})}


def train_step(state: TrainState, batch: dict, teacher_params: Any = None, *,
               model: nn.Module, tx: optax.GradientTransformation, rules: tuple,
               grad_accum_steps: int = 1,
               teacher: distill.MlmTeacher | None = None) -> tuple[TrainState, dict]:
    """One optimizer update on a global batch {key: [B, ...]} (distilling `teacher`,
    whose parameters are `teacher_params`, when given).

    Dropout keys come from `state.step_rng()`. With grad_accum_steps = k the batch is
    processed as k sequential micro-batches whose loss sums are divided once by the
    whole batch's weights (`training.objective_and_grads`): the whole batch's update.
    A non-finite loss or gradient norm skips the update (`training.apply_gradients`).
    Returns (next state, metrics of scalars).
    """
    terms_fn = lambda params, micro_batch, key: forward(
        model, params, micro_batch, rng=key, teacher=teacher, teacher_params=teacher_params)
    with nn.logical_axis_rules(rules):
        loss, grads, metrics = training.objective_and_grads(
            terms_fn, loss_coefficients(model, teacher), state.params, batch,
            state.step_rng(), grad_accum_steps)
    new_state, grad_norm, finite = training.apply_gradients(state, grads, loss, tx)
    metrics = dict(metrics, loss=loss, grad_norm=grad_norm,
                   nonfinite=(~finite).astype(jnp.float32))
    return new_state, metrics


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


def jit_steps(model: nn.Module, tx, mesh, shardings: TrainState, rules,
              grad_accum_steps: int = 1, teacher: distill.MlmTeacher | None = None,
              teacher_shardings: Any = None):
    """(train_step, eval_step) jitted once with explicit shardings; the state is donated.
    With a teacher, train_step takes its parameters as a third argument."""
    rules = tuple(tuple(r) for r in rules)
    batch = sharding.batch_sharding(mesh, rules)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    train = jax.jit(
        functools.partial(train_step, model=model, tx=tx, rules=rules,
                          grad_accum_steps=grad_accum_steps, teacher=teacher),
        in_shardings=(shardings, batch) + ((teacher_shardings,) if teacher else ()),
        out_shardings=(shardings, replicated), donate_argnums=0)
    evaluate = jax.jit(functools.partial(eval_step, model=model, rules=rules),
                       in_shardings=(shardings.params, batch), out_shardings=replicated)
    return train, evaluate


def evaluate(eval_fn, params, batches: Iterator[dict], mesh, rules, max_steps: int) -> dict:
    """Held-out MLM (and NSP) loss and accuracy over up to `max_steps` batches."""
    totals = None
    for i, batch in enumerate(batches):
        if i >= max_steps:
            break
        sums = eval_fn(params, sharding.global_batch(batch, mesh, rules))
        totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
    if totals is None:
        return {}
    t = jax.device_get(totals)
    out = {}
    for name in ("mlm", "nsp"):
        if f"{name}_count" in t:
            count = max(float(t[f"{name}_count"]), 1e-9)
            out[f"{name}_loss"] = float(t[f"{name}_loss_sum"]) / count
            out[f"{name}_accuracy"] = float(t[f"{name}_correct"]) / count
    out["loss"] = out["mlm_loss"] + out.get("nsp_loss", 0.0)
    return out
