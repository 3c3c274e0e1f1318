"""BERT's optimizers, built from optax pieces.

    clip_by_global_norm(1.0) -> AdamW(eps 1e-6, weight decay 0.01) or LAMB
    learning rate: linear warmup from 0, then linear decay to 0 at the last step
    weight decay skips every LayerNorm parameter and every bias

Differences from google-research/bert, on purpose: optax's AdamW applies
Adam's bias correction (as PyTorch's and HF's AdamW do); Google's
`AdamWeightDecayOptimizer` does not. The effect vanishes after warmup.
"""

from __future__ import annotations

from typing import Any

import jax
import optax

OPTIMIZERS = ("adamw", "lamb")


def bert_schedule(learning_rate: float, num_train_steps: int,
                  warmup_steps: int) -> optax.Schedule:
    """Google BERT's schedule: `lr * step / warmup` during warmup, then
    `lr * (1 - step / num_train_steps)`, reaching 0 at `num_train_steps`."""
    if num_train_steps <= 0:
        raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
    if not 0 <= warmup_steps <= num_train_steps:
        raise ValueError(f"warmup_steps ({warmup_steps}) must be in [0, num_train_steps]")
    decay = optax.linear_schedule(learning_rate * (1 - warmup_steps / num_train_steps), 0.0,
                                  num_train_steps - warmup_steps)
    if warmup_steps == 0:
        return decay
    warmup = optax.linear_schedule(0.0, learning_rate, warmup_steps)
    return optax.join_schedules([warmup, decay], [warmup_steps])


def decay_mask(params: Any) -> Any:
    """True where weight decay applies: not LayerNorm parameters (any path part
    containing `layer_norm`) and not biases (a last key containing `bias`)."""
    def decays(path, _):
        keys = [str(getattr(k, "key", k)) for k in path]
        return not (any("layer_norm" in k for k in keys) or "bias" in keys[-1])
    return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(*, learning_rate: float, num_train_steps: int, warmup_steps: int,
                   optimizer: str = "adamw", weight_decay: float = 0.01, b1: float = 0.9,
                   b2: float = 0.999, eps: float = 1e-6, max_grad_norm: float | None = 1.0
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """BERT's optimizer and its learning-rate schedule.

    optimizer: "adamw" (BERT's) or "lamb" (layer-wise adaptive; for batches of
        thousands, as in You et al. 2019).
    max_grad_norm: clip the global gradient norm to this (None or 0: no clipping).
    Returns (transformation, schedule: update count -> learning rate).
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    schedule = bert_schedule(learning_rate, num_train_steps, warmup_steps)
    make = optax.adamw if optimizer == "adamw" else optax.lamb
    parts = [make(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask)]
    if max_grad_norm:
        parts.insert(0, optax.clip_by_global_norm(max_grad_norm))
    # Gradient accumulation happens inside the train step (`training.accumulate_gradients`).
    return optax.chain(*parts), schedule
