"""The training core that pretraining (`bert_jax.pretrain`) and fine-tuning
(`bert_jax.finetune.trainer`) share, so both follow the same rules:

- `model_config`: the BertConfig from a preset name or a dict of fields;
- `accumulate_gradients`: one batch as k sequential micro-batches inside the step;
- `apply_gradients`: the one update rule, which skips any step whose loss or global
  gradient norm is not finite (params and optimizer state unchanged, the skip counted
  in `TrainState.nonfinite_steps`).

Starting from loaded weights is `bert_jax.pretrained.place_params`.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from bert_jax.config import BertConfig, preset
from bert_jax.train_state import TrainState


def model_config(spec: str | Any, vocab_size: int | None = None, **overrides) -> BertConfig:
    """A preset name, or a dict of BertConfig fields with an optional 'preset' (default
    bert-base). `vocab_size` (the tokenizer's) applies unless the dict sets one;
    `overrides` win over both."""
    fields = {"preset": spec} if isinstance(spec, str) else dict(spec)
    name = fields.pop("preset", "bert-base")
    if vocab_size is not None:
        fields.setdefault("vocab_size", vocab_size)
    return preset(name, **{**fields, **overrides})


def split_microbatches(batch: dict, count: int) -> dict:
    """[B, ...] -> [count, B / count, ...] taking rows i, i + count, ... for micro-batch i,
    so each micro-batch stays spread over the whole batch sharding."""
    def split(x):
        x = x.reshape(x.shape[0] // count, count, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1)
    return jax.tree.map(split, batch)


def accumulate_gradients(grads_and_metrics: Callable[[Any, dict], tuple[Any, dict]],
                         batch: dict, count: int) -> tuple[Any, dict]:
    """(grads, metrics) of `batch` ({key: [B, ...]}) summed over `count` sequential
    micro-batches of B / count rows (a `lax.scan`, so memory is one micro-batch's).

    `grads_and_metrics(index, micro_batch)` returns that micro-batch's share of the whole
    batch's gradients and metrics (e.g. weighted by its share of the loss weights), so
    the sums are the whole batch's. With count 1 it is called once on `batch`."""
    if count == 1:
        return grads_and_metrics(0, batch)
    micro = split_microbatches(batch, count)
    shapes = jax.eval_shape(grads_and_metrics, 0, jax.tree.map(lambda x: x[0], micro))
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    add = lambda total, item: (jax.tree.map(jnp.add, total, grads_and_metrics(*item)), None)
    sums, _ = jax.lax.scan(add, zeros, (jnp.arange(count), micro))
    return sums


def apply_gradients(state: TrainState, grads: Any, loss: jax.Array,
                    tx: optax.GradientTransformation) -> tuple[TrainState, jax.Array, jax.Array]:
    """One optimizer update, or none: a non-finite loss or global gradient norm leaves
    params and optimizer state unchanged and increments `nonfinite_steps`; `step` always
    advances. Returns (next state, global gradient norm, finite: bool scalar)."""
    grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    keep_if_bad = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
    new_state = state.replace(
        step=state.step + 1, params=keep_if_bad(params, state.params),
        opt_state=keep_if_bad(opt_state, state.opt_state),
        nonfinite_steps=state.nonfinite_steps + (~finite).astype(jnp.int32))
    return new_state, grad_norm, finite
