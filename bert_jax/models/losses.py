"""Losses and accuracies for pretraining and the task heads (all in float32).

Each returns a weighted sum and its weight, `(sum, weight)`, never their ratio: a step
adds these up over its micro-batches and divides once (`train_step.objective_and_grads`),
so a batch split into micro-batches gives the whole batch's means (as flax's
`compute_weighted_cross_entropy` returns a sum and a normalizer).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array
Pair = tuple[Array, Array]  # (weighted sum, weight sum)


def _weights(weights: Array | None, shape) -> Array:
    return jnp.ones(shape, jnp.float32) if weights is None else weights.astype(jnp.float32)


def mean(pair: Pair) -> Array:
    """sum / weight (0 where the weight is 0)."""
    total, weight = pair
    return total / jnp.maximum(weight, 1e-5)


def weighted_cross_entropy(logits: Array, labels: Array, weights: Array | None = None) -> Pair:
    """Cross-entropy summed with `weights`, and the weight sum.

    logits [..., C], labels [...] int, weights [...] (default all ones)."""
    weights = _weights(weights, labels.shape)
    losses = softmax_cross_entropy(logits.astype(jnp.float32), labels)
    return jnp.sum(losses * weights), jnp.sum(weights)


def softmax_cross_entropy(logits: Array, labels: Array) -> Array:
    """-log softmax(logits)[labels], the label's logit picked by a one-hot product.

    optax's integer-label form picks it with a gather, whose gradient is a scatter
    over the whole [..., C] logits (625 MB per bert-base step on a GPU, where scatters
    serialise); the one-hot product fuses into the log-softmax and its gradient is
    softmax - one_hot. Exact: one term is nonzero; a select, so -inf (masked) logits
    elsewhere stay out of it.
    """
    is_label = labels[..., None] == jnp.arange(logits.shape[-1])
    picked = jnp.sum(jnp.where(is_label, logits, 0.0), -1)
    return jax.nn.logsumexp(logits, axis=-1) - picked


def weighted_accuracy(logits: Array, labels: Array, weights: Array | None = None) -> Pair:
    """Correct predictions counted with `weights`, and the weight sum."""
    weights = _weights(weights, labels.shape)
    return jnp.sum((jnp.argmax(logits, -1) == labels) * weights), jnp.sum(weights)


def pretraining_loss(mlm_logits: Array, nsp_logits: Array | None, batch: dict) -> dict:
    """BERT's loss terms, {name: (sum, weight)}.

    Masked-LM cross-entropy and accuracy over `masked_lm_weights`, and (unless nsp_logits is None:
    MLM only) next-sentence ones. The training loss is mlm_loss + nsp_loss, each its own weighted
    mean.

    mlm_logits [B, P, V] at `batch['masked_lm_positions']`; nsp_logits [B, 2], or
    [B, K, 2] for packed rows with `batch['next_sentence_weights']` [B, K].
    """
    ids, weights = batch["masked_lm_ids"], batch["masked_lm_weights"]
    terms = {"mlm_loss": weighted_cross_entropy(mlm_logits, ids, weights),
             "mlm_accuracy": weighted_accuracy(mlm_logits, ids, weights)}
    if nsp_logits is not None:
        labels, weights = batch["next_sentence_labels"], batch.get("next_sentence_weights")
        terms.update(nsp_loss=weighted_cross_entropy(nsp_logits, labels, weights),
                     nsp_accuracy=weighted_accuracy(nsp_logits, labels, weights))
    return terms


def regression_loss(predictions: Array, targets: Array, weights: Array | None = None) -> Pair:
    """Squared error summed with `weights`; predictions [B, 1] or [B], targets [B]."""
    err = jnp.square(predictions.reshape(targets.shape).astype(jnp.float32) - targets)
    weights = _weights(weights, targets.shape)
    return jnp.sum(err * weights), jnp.sum(weights)


def span_loss(start_logits: Array, end_logits: Array, start_positions: Array,
              end_positions: Array, weights: Array | None = None) -> Pair:
    """SQuAD loss: the mean of the start and end position cross-entropies per example.

    Summed with `weights` (logits [B, L])."""
    start, weight = weighted_cross_entropy(start_logits, start_positions, weights)
    end, _ = weighted_cross_entropy(end_logits, end_positions, weights)
    return (start + end) / 2, weight


def distillation_kl(student_logits: Array, teacher_logits: Array, temperature: float,
                    weights: Array | None = None) -> Pair:
    """Hinton et al.'s soft-target loss: T^2 * KL(softmax(teacher/T) || softmax(student/T)).

    Over the last axis, summed with `weights` (logits [..., C], weights [...]). The T^2 keeps its
    gradients on the scale of the hard-label loss's as T changes."""
    t = jnp.float32(temperature)
    teacher = jax.nn.log_softmax(teacher_logits.astype(jnp.float32) / t, axis=-1)
    student = jax.nn.log_softmax(student_logits.astype(jnp.float32) / t, axis=-1)
    kl = jnp.sum(jnp.exp(teacher) * (teacher - student), axis=-1)
    weights = _weights(weights, kl.shape)
    return t * t * jnp.sum(kl * weights), jnp.sum(weights)


# --- matching a teacher's states (TinyBERT; models/matching.py captures them) -----------

def matched_layers(student_layers: int, teacher_layers: int) -> list[int]:
    """The teacher layer (0-based) matched to each student layer: TinyBERT's uniform mapping.

    Student layer m <- teacher layer m * N / M counted from 1, so the last layers meet
    (2 of 6 -> 2, 5)."""
    return [(j + 1) * teacher_layers // student_layers - 1 for j in range(student_layers)]


def masked_mse(a: Array, b: Array, weights: Array) -> Pair:
    """Mean squared difference over the trailing axes of `weights`-weighted rows: (sum, weight).

    Summed over the rows with their weights. a, b [*W, ...], weights [*W]."""
    err = jnp.square(a.astype(jnp.float32) - b.astype(jnp.float32))
    err = jnp.mean(err.reshape(*weights.shape, -1), axis=-1)
    return jnp.sum(err * weights), jnp.sum(weights)


def comparable_attention(student_probs: list, teacher_probs: list) -> tuple[list, list]:
    """Per-layer attention probabilities [B, heads, L, L] as compared.

    Unchanged when the head counts are equal, otherwise each model's mean over its heads
    ([B, 1, L, L]), since no head of one model corresponds to a head of the other."""
    if student_probs[0].shape[1] == teacher_probs[0].shape[1]:
        return student_probs, teacher_probs
    mean_heads = lambda probs: [p.mean(axis=1, keepdims=True) for p in probs]
    return mean_heads(student_probs), mean_heads(teacher_probs)


def _mean_over_layers(pairs: list[Pair]) -> Pair:
    """The (sum, weight) of the mean over layers of pairs that share one weight."""
    return sum(total for total, _ in pairs) / len(pairs), pairs[0][1]


def matching_losses(student: tuple, teacher: tuple, mask: Array, *, hidden: bool,
                    attention: bool, project=lambda h: h) -> dict[str, Pair]:
    """TinyBERT's layer-by-layer losses, {"hidden_loss", "attention_loss": (sum, weight)}.

    Those asked for: the MSE of the embeddings (0 <- 0) and of each student layer's output against
    its `matched_layers` teacher layer's, the student's through `project` (to the teacher's width);
    the MSE of their attention probabilities (`comparable_attention`). Each is the mean over the
    layers of the MSE over the `mask`ed positions [B, L] (query rows for attention). student,
    teacher: (hidden states [B, L, H] embeddings first, attention probabilities [B, heads, L, L] per
    layer), as `matching.captured_states` gives them."""
    (s_hidden, s_probs), (t_hidden, t_probs) = student, teacher
    pairs = matched_layers(len(s_probs), len(t_probs))
    mask = mask.astype(jnp.float32)
    terms = {}
    if hidden:
        terms["hidden_loss"] = _mean_over_layers(
            [masked_mse(project(s_hidden[0]), t_hidden[0], mask)]
            + [masked_mse(project(s_hidden[j + 1]), t_hidden[i + 1], mask)
               for j, i in enumerate(pairs)])
    if attention:
        s_probs, t_probs = comparable_attention(s_probs, t_probs)
        rows = mask[:, None, :]  # [B, 1, L] query rows, broadcast over heads
        terms["attention_loss"] = _mean_over_layers(
            [masked_mse(s_probs[j], t_probs[i], jnp.broadcast_to(rows, s_probs[j].shape[:3]))
             for j, i in enumerate(pairs)])
    return terms
