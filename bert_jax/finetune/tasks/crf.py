"""A linear-chain CRF over the word-level positions of a tagging head.

BERT tags the first sub-token of each word; the CRF scores transitions between
consecutive *words*, so the labeled positions (a mask over the sub-tokens) are first
moved to a contiguous prefix with `compact`.

Shapes: B batch, T positions, C tags.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import heads
from bert_jax.models.blocks import zeros_init

Array = jax.Array


def compact(mask: Array, *arrays: Array) -> tuple[Array, ...]:
    """Moves the positions where mask [B, T] is set to the front, keeping their order.

    Returns (mask, *arrays) gathered along axis 1."""
    order = jnp.argsort(-(mask > 0).astype(jnp.int32), axis=1, stable=True)
    gather = lambda x: jnp.take_along_axis(x, order.reshape(order.shape + (1,) * (x.ndim - 2)),
                                           axis=1)
    return (gather(mask > 0), *map(gather, arrays))


def log_likelihood(emissions: Array, tags: Array, mask: Array, transitions: Array,
                   start: Array, end: Array) -> Array:
    """log p(tags | emissions) [B] for prefix masks.

    emissions [B, T, C], tags [B, T], mask [B, T] bool, transitions [C, C] (from, to), start/end
    [C]."""
    emissions = emissions.astype(jnp.float32)
    first = jnp.take_along_axis(emissions[:, 0], tags[:, :1], axis=1)[:, 0] + start[tags[:, 0]]
    emit = jnp.take_along_axis(emissions, tags[..., None], axis=2)[..., 0]
    trans = transitions[tags[:, :-1], tags[:, 1:]]
    gold = first + jnp.sum((emit[:, 1:] + trans) * mask[:, 1:], axis=1)
    lengths = jnp.sum(mask, axis=1).astype(jnp.int32)
    last = jnp.take_along_axis(tags, jnp.maximum(lengths - 1, 0)[:, None], axis=1)[:, 0]
    gold = gold + end[last]

    def step(alpha, inputs):
        emit_t, mask_t = inputs
        nxt = jax.nn.logsumexp(alpha[:, :, None] + transitions[None], axis=1) + emit_t
        return jnp.where(mask_t[:, None], nxt, alpha), None

    alpha0 = start[None] + emissions[:, 0]
    alpha, _ = jax.lax.scan(step, alpha0, (jnp.swapaxes(emissions[:, 1:], 0, 1),
                                           jnp.swapaxes(mask[:, 1:], 0, 1)))
    partition = jax.nn.logsumexp(alpha + end[None], axis=1)
    return jnp.where(lengths > 0, gold - partition, 0.0)


def viterbi(emissions: Array, mask: Array, transitions: Array, start: Array,
            end: Array) -> Array:
    """Best tag sequence [B, T] under prefix masks (positions past the mask get tag 0)."""
    emissions = emissions.astype(jnp.float32)

    def forward(score, inputs):
        emit_t, mask_t = inputs
        candidates = score[:, :, None] + transitions[None]          # [B, from, to]
        best_prev = jnp.argmax(candidates, axis=1)                    # [B, to]
        nxt = jnp.max(candidates, axis=1) + emit_t
        keep = mask_t[:, None]
        # Past the end, carry the score and point each tag at itself.
        identity = jnp.broadcast_to(jnp.arange(score.shape[1]), best_prev.shape)
        return jnp.where(keep, nxt, score), jnp.where(keep, best_prev, identity)

    score, pointers = jax.lax.scan(forward, start[None] + emissions[:, 0],
                                   (jnp.swapaxes(emissions[:, 1:], 0, 1),
                                    jnp.swapaxes(mask[:, 1:], 0, 1)))
    last = jnp.argmax(score + end[None], axis=1)                      # [B]

    def backward(tag, pointer_t):
        prev = jnp.take_along_axis(pointer_t, tag[:, None], axis=1)[:, 0]
        return prev, tag

    first, rest = jax.lax.scan(backward, last, pointers, reverse=True)
    path = jnp.concatenate([first[:, None], jnp.swapaxes(rest, 0, 1)], axis=1)
    return jnp.where(mask, path, 0)


class BertForTokenClassificationCRF(heads.BertForTokenClassification):
    """The tagging head plus CRF parameters.

    Returns (emissions [B, L, C], transitions [C, C], start [C], end [C])."""

    @nn.compact
    def __call__(self, input_ids, input_mask=None, segment_ids=None, **kwargs):
        emissions = super().__call__(input_ids, input_mask, segment_ids, **kwargs)
        c = self.num_labels
        param = lambda name, shape, axes: self.param(name, zeros_init(axes), shape, jnp.float32)
        return (emissions, param("crf_transitions", (c, c), ("classes", None)),
                param("crf_start", (c,), ("classes",)), param("crf_end", (c,), ("classes",)))
