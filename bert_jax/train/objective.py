"""What a job trains and evaluates.

One protocol, `Objective`, that the train step (`train_step.jit_train_step`), the loop
(`lifecycle.Job.loop`) and the checkpoints call without asking which objective they run, as t5x's
`BaseModel` is to its trainer. Its implementations: BERT's MLM/NSP
(`pretrain.steps.BertPretraining`), MLM distillation with TinyBERT's matching
(`pretrain.distill.MlmDistillation`), ELECTRA (`pretrain.electra.Electra`) and fine-tuning's task
loss or task distillation (`finetune.objective.Objective`). A new objective is a new implementation.

Every loss is a dict of (weighted sum, weight) terms (`models.losses`), divided once for
the whole batch (`train_step.objective_and_grads`); held-out sums add up over batches and
are divided once too (`evaluate`).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Protocol

import jax
import jax.numpy as jnp

from bert_jax.train.sharding import Partitioner

Terms = dict[str, tuple[jax.Array, jax.Array]]  # {name: (weighted sum, weight)}


class Objective(Protocol):
    """What a job minimises and reports. All methods are pure and traced inside jit.

    coefficients: the trained loss, sum_k coefficients[k] * mean(loss_terms[k]);
    eval_coefficients: the held-out loss the same way over `eval_step`'s sums ({} where
    `eval_step` gives predictions rather than sums);
    extra: an input of every train step that is not trained (a distillation teacher's
    parameters), None for none; extra_shardings: its shardings."""

    coefficients: Mapping[str, float]
    eval_coefficients: Mapping[str, float]
    extra: Any
    extra_shardings: Any

    def loss_terms(self, params: Any, batch: dict, extra: Any, dropout_key: jax.Array) -> Terms:
        """The loss terms of one (micro-)batch {key: [B, ...]} with dropout from `dropout_key`.

        `extra` is the step's `extra` input."""

    def eval_step(self, params: Any, batch: dict) -> dict:
        """One held-out batch without dropout.

        (sum, weight) pairs that `evaluate` adds up over batches (pretraining; an OrderedDict keeps
        their reported order, which jit would sort), or the per-row outputs a task's metric reads
        (fine-tuning)."""

    def models_beside(self, params: Any) -> dict[str, tuple[Any, Any]]:
        """Models each checkpoint also writes, as model directories beside the state.

        {directory name: (config, parameters)} ({} for most objectives; ELECTRA's generator)."""


def jit_eval_step(objective: Objective, param_shardings: Any, partitioner: Partitioner):
    """`objective.eval_step` jitted over the parameters' and the batch's shardings.

    Its outputs are replicated, so that every process can read all of them."""
    return jax.jit(objective.eval_step,
                   in_shardings=(param_shardings, partitioner.batch_sharding),
                   out_shardings=partitioner.replicated)


def evaluate(objective: Objective, eval_fn, params: Any, batches: Iterator[dict],
             place, max_steps: int) -> dict:
    """The held-out means of `eval_fn`'s (sum, weight) pairs over up to `max_steps` batches.

    The pairs come from `jit_eval_step`; each pair is summed over the batches and divided once, and
    `loss` weighed by `objective.eval_coefficients`. place: a host batch -> the step's global
    arrays. {} when there are no batches."""
    totals = None
    for i, batch in enumerate(batches):
        if i >= max_steps:
            break
        sums = eval_fn(params, place(batch))
        totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
    if totals is None:
        return {}
    out = {name: float(total) / max(float(weight), 1e-9)
           for name, (total, weight) in jax.device_get(totals).items()}
    out["loss"] = sum(c * out[k] for k, c in objective.eval_coefficients.items())
    return out
