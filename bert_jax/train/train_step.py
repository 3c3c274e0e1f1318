"""The one train step of every job (pretraining, fine-tuning, distillation).

It is built so all follow the same rules:

- `objective_and_grads`: the loss of (sum, weight) terms divided once for the whole batch,
  whether it runs as one pass or k sequential micro-batches (`accumulate_gradients`);
- `apply_gradients`: the one update rule, which skips any step whose loss or global
  gradient norm is not finite (params and optimizer state unchanged, the skip counted
  in `TrainState.nonfinite_steps`; `train_loop.NonFiniteGuard` watches the skips);
- `train_step` / `jit_train_step`: a job's objective (`train.objective.Objective`)
  through both, jitted over the run's shardings.

Starting from loaded weights is `bert_jax.weights.pretrained.init_params`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from bert_jax.models import losses
from bert_jax.train.objective import Objective
from bert_jax.train.sharding import Partitioner
from bert_jax.train.train_state import TrainState


def split_microbatches(batch: dict, count: int) -> dict:
    """[B, ...] -> [count, B / count, ...], micro-batch i taking rows i, i + count, ...

    So each micro-batch stays spread over the whole batch sharding."""
    def split(x):
        x = x.reshape(x.shape[0] // count, count, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1)
    return jax.tree.map(split, batch)


def accumulate_gradients(grads_and_metrics: Callable[[Any, dict], tuple[Any, dict]],
                         batch: dict, count: int) -> tuple[Any, dict]:
    """(grads, metrics) of `batch` summed over `count` sequential micro-batches.

    `batch`: {key: [B, ...]}; micro-batches of B / count rows (a `lax.scan`, so memory is one
    micro-batch's).

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


def objective_and_grads(terms_fn: Callable[[Any, dict, jax.Array], dict],
                        coefficients: dict[str, float], params: Any, batch: dict,
                        rng: jax.Array, count: int = 1) -> tuple[jax.Array, Any, dict]:
    """The whole batch's loss, its gradient and every term's mean, over sequential micro-batches.

    The loss is sum_k coefficients[k] * (sum_k / weight_k), over `count` sequential micro-batches of
    `batch` (a `lax.scan`: the memory of one micro-batch).

    terms_fn(params, batch, dropout_key) -> {name: (weighted sum, weight)} (`losses`);
    micro-batch i draws its dropout with fold_in(rng, i). The weights depend on the batch
    alone, so the whole batch's are known before any micro-batch runs: each
    micro-batch's sums are scaled by them (computed by `terms_fn` on the whole batch,
    whose model outputs XLA then drops as unused), and the sums of all the micro-batches
    are divided once, after accumulation. Returns (loss, grads, {name: mean})."""
    totals = None
    if count > 1:
        whole = terms_fn(jax.lax.stop_gradient(params), batch, rng)
        totals = {name: weight for name, (_, weight) in whole.items()}

    def grads_and_terms(index, micro_batch):
        key = rng if count == 1 else jax.random.fold_in(rng, index)

        def loss(p):
            terms = terms_fn(p, micro_batch, key)
            weights = totals or {name: weight for name, (_, weight) in terms.items()}
            return sum(c * losses.mean((terms[k][0], weights[k]))
                       for k, c in coefficients.items()), terms
        grads, terms = jax.grad(loss, has_aux=True)(params)
        return grads, terms

    grads, sums = accumulate_gradients(grads_and_terms, batch, count)
    loss, means = combine(sums, coefficients)
    return loss, grads, means


def combine(terms: dict, coefficients: dict[str, float]) -> tuple[jax.Array, dict]:
    """(loss, {name: mean}) of (sum, weight) `terms`: the loss weighs their means."""
    means = {name: losses.mean(pair) for name, pair in terms.items()}
    return sum(c * means[k] for k, c in coefficients.items()), means


def apply_gradients(state: TrainState, grads: Any, loss: jax.Array,
                    tx: optax.GradientTransformation) -> tuple[TrainState, jax.Array, jax.Array]:
    """One optimizer update, or none.

    A non-finite loss or global gradient norm leaves params and optimizer state unchanged and
    increments `nonfinite_steps`; `step` always advances. Returns (next state, global gradient norm,
    finite: bool scalar)."""
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


def train_step(state: TrainState, batch: dict, extra: Any = None, *, objective: Objective,
               tx: optax.GradientTransformation, grad_accum_steps: int = 1,
               counts: Callable[[dict], dict] | None = None) -> tuple[TrainState, dict]:
    """The one optimizer update of every job.

    (TrainState, global batch {key: [B, ...]}, extra) -> (next TrainState, metrics of scalars).

    The loss is `objective`'s (`train.objective.Objective`): its `loss_terms`, of whose
    means its `coefficients` weigh the trained loss; `extra` is its step input that is
    not trained (a distillation teacher's parameters). With grad_accum_steps = k the
    batch runs as k sequential micro-batches and gives the whole batch's update
    (`objective_and_grads`); a non-finite loss or gradient norm skips it
    (`apply_gradients`). Dropout keys come from `state.step_rng()`. `counts(batch)`:
    further metrics of the batch itself (examples in it)."""
    terms_fn = lambda params, micro_batch, key: objective.loss_terms(params, micro_batch,
                                                                      extra, key)
    loss, grads, metrics = objective_and_grads(terms_fn, objective.coefficients, state.params,
                                               batch, state.step_rng(), grad_accum_steps)
    state, grad_norm, finite = apply_gradients(state, grads, loss, tx)
    metrics.update(loss=loss, grad_norm=grad_norm, nonfinite=~finite,
                   **(counts(batch) if counts is not None else {}))
    return state, metrics


def jit_train_step(objective: Objective, tx: optax.GradientTransformation,
                   shardings: TrainState, partitioner: Partitioner, *,
                   grad_accum_steps: int = 1, counts: Callable[[dict], dict] | None = None):
    """`train_step` of `objective` jitted with the state's and the batch's shardings.

    The state's `shardings` (donated), the batch's sharding on `partitioner`'s mesh and, when the
    objective has an extra input, its `extra_shardings` (the step then takes it as a third
    argument); metrics come back replicated."""
    step = functools.partial(train_step, objective=objective, tx=tx,
                             grad_accum_steps=grad_accum_steps, counts=counts)
    extra = () if objective.extra is None else (objective.extra_shardings,)
    return jax.jit(step, in_shardings=(shardings, partitioner.batch_sharding, *extra),
                   out_shardings=(shardings, partitioner.replicated), donate_argnums=0)
