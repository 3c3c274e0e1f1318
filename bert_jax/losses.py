"""Losses and accuracies for pretraining and the task heads (all in float32)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

Array = jax.Array


def weighted_cross_entropy(logits: Array, labels: Array, weights: Array | None = None):
    """Mean of the per-item cross-entropy weighted by `weights`, with the weight sum.

    logits [..., C], labels [...] int, weights [...] (default all ones).
    Returns (loss, correct_weighted_sum, weight_sum).
    """
    logits = logits.astype(jnp.float32)
    if weights is None:
        weights = jnp.ones(labels.shape, jnp.float32)
    weights = weights.astype(jnp.float32)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    total = jnp.sum(weights)
    denom = jnp.maximum(total, 1e-5)
    correct = jnp.sum((jnp.argmax(logits, -1) == labels) * weights)
    return jnp.sum(losses * weights) / denom, correct, total


def pretraining_loss(mlm_logits: Array, nsp_logits: Array | None,
                     batch: dict) -> tuple[Array, dict]:
    """BERT's loss: masked-LM cross-entropy averaged over `masked_lm_weights`
    plus next-sentence cross-entropy (none when nsp_logits is None: MLM only).

    mlm_logits [B, P, V] at `batch['masked_lm_positions']`; nsp_logits [B, 2], or
    [B, K, 2] for packed rows with `batch['next_sentence_weights']` [B, K].
    """
    mlm_loss, mlm_correct, mlm_count = weighted_cross_entropy(
        mlm_logits, batch["masked_lm_ids"], batch["masked_lm_weights"])
    mlm_accuracy = mlm_correct / jnp.maximum(mlm_count, 1.0)
    if nsp_logits is None:
        return mlm_loss, {"loss": mlm_loss, "mlm_loss": mlm_loss, "mlm_accuracy": mlm_accuracy}
    nsp_loss, nsp_correct, nsp_count = weighted_cross_entropy(
        nsp_logits, batch["next_sentence_labels"], batch.get("next_sentence_weights"))
    loss = mlm_loss + nsp_loss
    metrics = {
        "loss": loss,
        "mlm_loss": mlm_loss,
        "nsp_loss": nsp_loss,
        "mlm_accuracy": mlm_accuracy,
        "nsp_accuracy": nsp_correct / jnp.maximum(nsp_count, 1.0),
    }
    return loss, metrics


def regression_loss(predictions: Array, targets: Array, weights: Array | None = None):
    """Mean squared error; predictions [B, 1] or [B], targets [B]."""
    err = jnp.square(predictions.reshape(targets.shape).astype(jnp.float32) - targets)
    if weights is None:
        return jnp.mean(err)
    return jnp.sum(err * weights) / jnp.maximum(jnp.sum(weights), 1e-5)


def span_loss(start_logits: Array, end_logits: Array, start_positions: Array,
              end_positions: Array, weights: Array | None = None) -> Array:
    """SQuAD loss: mean of the start and end position cross-entropies (logits [B, L])."""
    start, _, _ = weighted_cross_entropy(start_logits, start_positions, weights)
    end, _, _ = weighted_cross_entropy(end_logits, end_positions, weights)
    return (start + end) / 2


def distillation_kl(student_logits: Array, teacher_logits: Array, temperature: float,
                    weights: Array | None = None) -> Array:
    """Hinton et al.'s soft-target loss: T^2 * KL(softmax(teacher/T) || softmax(student/T))
    over the last axis, averaged with `weights` (logits [..., C], weights [...]). The T^2
    keeps its gradients on the scale of the hard-label loss's as T changes."""
    t = jnp.float32(temperature)
    teacher = jax.nn.log_softmax(teacher_logits.astype(jnp.float32) / t, axis=-1)
    student = jax.nn.log_softmax(student_logits.astype(jnp.float32) / t, axis=-1)
    kl = jnp.sum(jnp.exp(teacher) * (teacher - student), axis=-1)
    if weights is None:
        weights = jnp.ones(kl.shape, jnp.float32)
    weights = weights.astype(jnp.float32)
    return t * t * jnp.sum(kl * weights) / jnp.maximum(jnp.sum(weights), 1e-5)
