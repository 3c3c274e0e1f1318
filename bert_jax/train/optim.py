"""BERT's optimizers, built from optax pieces.

    clip_by_global_norm(1.0) -> AdamW(eps 1e-6, weight decay 0.01) or LAMB
    learning rate: linear warmup from 0, then linear decay to 0 at the last step
    weight decay skips every LayerNorm parameter and every bias

Differences from google-research/bert, on purpose: optax's AdamW applies
Adam's bias correction (as PyTorch's and HF's AdamW do); Google's
`AdamWeightDecayOptimizer` does not. The effect vanishes after warmup.
"""

from __future__ import annotations

import fnmatch
import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

from bert_jax.errors import UserError

OPTIMIZERS = ("adamw", "lamb")


def bert_learning_rate(count, learning_rate, num_train_steps, warmup_steps):
    """Google BERT's schedule at update `count`.

    `lr * count / warmup` during warmup, then `lr * (1 - count / num_train_steps)`, reaching 0 at
    `num_train_steps`. Plain jnp arithmetic, so the hyperparameters may be traced arrays
    (`make_optimizer`'s `injected`)."""
    count = jnp.asarray(count, jnp.float32)
    warmup = count / jnp.maximum(warmup_steps, 1)
    decay = 1.0 - count / num_train_steps
    return learning_rate * jnp.clip(jnp.where(count < warmup_steps, warmup, decay), 0.0, 1.0)


def wsd_learning_rate(count, learning_rate, num_train_steps, warmup_steps,
                      decay_fraction=0.1):
    """Warmup-stable-decay (the trapezoid ModernBERT trained with).

    Linear warmup, the peak until the last `decay_fraction` of the steps, then linear decay to 0."""
    count = jnp.asarray(count, jnp.float32)
    decay_steps = jnp.maximum(decay_fraction * num_train_steps, 1.0)
    warmup = count / jnp.maximum(warmup_steps, 1)
    decay = (num_train_steps - count) / decay_steps
    return learning_rate * jnp.clip(jnp.minimum(warmup, decay), 0.0, 1.0)


SCHEDULES = {"bert": bert_learning_rate, "wsd": wsd_learning_rate}


def bert_schedule(learning_rate: float, num_train_steps: int,
                  warmup_steps: int, shape: str = "bert") -> optax.Schedule:
    """`bert_learning_rate` (or another of SCHEDULES) with fixed hyperparameters (checked).

    Update count -> rate."""
    if shape not in SCHEDULES:
        raise UserError(f"lr_schedule must be one of {', '.join(SCHEDULES)}, got {shape!r}")
    if num_train_steps <= 0:
        raise UserError(f"num_train_steps must be positive, got {num_train_steps}")
    if not 0 <= warmup_steps <= num_train_steps:
        raise UserError(f"warmup_steps ({warmup_steps}) must be in [0, num_train_steps]")
    return functools.partial(SCHEDULES[shape], learning_rate=learning_rate,
                             num_train_steps=num_train_steps, warmup_steps=warmup_steps)


def decay_mask(params: Any) -> Any:
    """True where weight decay applies.

    Not LayerNorm parameters (any path part ending in `norm`: `layer_norm`, `final_norm`) and not
    biases (a last key containing `bias`)."""
    def decays(path, _):
        keys = [str(getattr(k, "key", k)) for k in path]
        return not (any(k.endswith("norm") for k in keys) or "bias" in keys[-1])
    return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(*, learning_rate: float, num_train_steps: int, warmup_steps: int,
                   optimizer: str = "adamw", weight_decay: float = 0.01, b1: float = 0.9,
                   b2: float = 0.999, eps: float = 1e-6, max_grad_norm: float | None = 1.0,
                   injected: bool = False, lr_schedule: str = "bert"
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """BERT's optimizer and its learning-rate schedule.

    optimizer: "adamw" (BERT's) or "lamb" (layer-wise adaptive; for batches of
        thousands, as in You et al. 2019).
    max_grad_norm: clip the global gradient norm to this (None or 0: no clipping).
    lr_schedule: one of SCHEDULES ("bert": warmup then linear decay; "wsd").
    injected: keep learning_rate, num_train_steps and warmup_steps in the optimizer
        state (`optax.inject_hyperparams`) instead of the compiled program, so runs
        that differ only in them share one compiled train step (fine-tuning's grid).
    Returns (transformation, schedule: update count -> learning rate).
    """
    if optimizer not in OPTIMIZERS:
        raise UserError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    schedule = bert_schedule(learning_rate, num_train_steps, warmup_steps, lr_schedule)

    def build(learning_rate, num_train_steps, warmup_steps):
        rate = functools.partial(SCHEDULES[lr_schedule], learning_rate=learning_rate,
                                 num_train_steps=num_train_steps, warmup_steps=warmup_steps)
        make = optax.adamw if optimizer == "adamw" else optax.lamb
        parts = [make(rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask)]
        if max_grad_norm:
            parts.insert(0, optax.clip_by_global_norm(max_grad_norm))
        # Gradient accumulation happens inside the train step (`train_step.accumulate_gradients`).
        return optax.chain(*parts)

    hyperparams = dict(learning_rate=learning_rate, num_train_steps=num_train_steps,
                       warmup_steps=warmup_steps)
    if injected:
        inject = optax.inject_hyperparams(build, hyperparam_dtype=jnp.float32)
        return inject(**hyperparams), schedule
    return build(**hyperparams), schedule


def set_hyperparams(opt_state: Any, **values: float) -> Any:
    """`opt_state` with the hyperparameters it keeps set to `values`.

    These are the ones `make_optimizer(injected=True)` keeps in it, each placed as the value it
    replaces: a run resumed with a new learning rate or schedule applies the one it logs, not the
    one saved."""
    is_injected = lambda x: isinstance(x, (optax.InjectHyperparamsState,
                                           optax.InjectStatefulHyperparamsState))

    def update(node):
        if not is_injected(node):
            return node
        hyperparams = {k: jax.device_put(jnp.asarray(values[k], v.dtype), v.sharding)
                       if k in values else v for k, v in node.hyperparams.items()}
        return node._replace(hyperparams=hyperparams)
    return jax.tree.map(update, opt_state, is_leaf=is_injected)


# --- freezing ------------------------------------------------------------------------------
# Staged fine-tuning: parameters whose path matches a pattern get no update (and hold no
# optimizer state) for a while, then train with the rest.

def param_path(path) -> str:
    """A parameter's path as "bert/encoder/layer_0/attention/query/kernel"."""
    return "/".join(str(getattr(k, "key", k)) for k in path)


def frozen_mask(params: Any, patterns: str) -> Any:
    """True where a parameter's path matches one of the comma-separated glob `patterns`.

    For example "bert/*" the encoder, "bert/embeddings/*". A pattern that matches nothing raises,
    naming the top-level groups."""
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    paths = [param_path(path) for path, _ in jax.tree_util.tree_leaves_with_path(params)]
    for pattern in wanted:
        if not any(fnmatch.fnmatchcase(path, pattern) for path in paths):
            groups = sorted({"/".join(path.split("/")[:2]) for path in paths})
            raise UserError(f"freeze pattern {pattern!r} matches no parameter; parameters "
                            f"start with: {', '.join(groups)}")
    return jax.tree_util.tree_map_with_path(
        lambda path, _: any(fnmatch.fnmatchcase(param_path(path), p) for p in wanted), params)


def freeze(tx: optax.GradientTransformation, mask: Any) -> optax.GradientTransformation:
    """`tx` on the parameters where `mask` is False; zero updates and no state elsewhere."""
    labels = jax.tree.map(lambda frozen: "frozen" if frozen else "trained", mask)
    return optax.partition({"trained": tx, "frozen": optax.set_to_zero()}, labels)


def unfreeze_state(frozen_state: Any, full_state: Any) -> Any:
    """`tx`'s state for all parameters after `freeze(tx, mask)` ran.

    The trained parameters keep their state (moments, counts, schedule), the frozen ones start from
    `full_state` (a fresh `tx.init`)."""
    trained = frozen_state.inner_states["trained"].inner_state
    is_masked = lambda x: isinstance(x, optax.MaskedNode)
    return jax.tree.map(lambda kept, fresh: fresh if is_masked(kept) else kept,
                        trained, full_state, is_leaf=is_masked)
