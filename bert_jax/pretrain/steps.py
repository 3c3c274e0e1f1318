"""BERT's pretraining objective and the jitted steps of any pretraining objective.

The objective is `BertPretraining` (MLM plus NSP or SOP, or MLM only), a
`train.objective.Objective`. No files, no workdir: `pretrain` runs these, `bert-jax compile`
compiles them for a TPU topology, the benchmarks time them."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from bert_jax.models import losses
from bert_jax.models.heads import BertForPreTraining
from bert_jax.train import objective as objectives
from bert_jax.train import train_step
from bert_jax.train.sharding import Partitioner
from bert_jax.train.train_state import TrainState

# The model's optional inputs, passed through when the batch has them (packed rows).
_OPTIONAL_INPUTS = ("position_ids", "example_ids", "next_sentence_positions")


def dummy_inputs(batch_size: int, seq_length: int, num_predictions: int) -> tuple:
    ids = jnp.zeros((batch_size, seq_length), jnp.int32)
    return ids, ids, ids, jnp.zeros((batch_size, num_predictions), jnp.int32)


def apply_model(model: nn.Module, params: Any, batch: dict, *, rng=None,
                capture: dict | None = None) -> tuple:
    """(the model's `PreTrainingOutput` on one batch, the intermediates it captured or None).

    The intermediates are those of `capture`'s `apply` keywords; dropout is on when `rng` is
    given."""
    extra = {k: batch[k] for k in _OPTIONAL_INPUTS if k in batch}
    out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                      batch["segment_ids"], batch["masked_lm_positions"], **extra,
                      deterministic=rng is None, rngs={"dropout": rng} if rng is not None else {},
                      **(capture or {}))
    return out if capture else (out, None)


@dataclasses.dataclass(frozen=True)
class BertPretraining:
    """BERT's objective (`train.objective.Objective`): the masked-LM loss plus the sentence loss.

    The next-sentence (or sentence-order) loss only when the model has the head; each loss is its
    own weighted mean (`losses.pretraining_loss`). `rules`: the run's logical axis rules."""

    model: BertForPreTraining
    rules: tuple = ()
    extra = None  # no step input beside the batch
    extra_shardings = None

    @property
    def coefficients(self) -> dict[str, float]:
        return {"mlm_loss": 1.0, **({"nsp_loss": 1.0} if self.model.next_sentence_prediction
                                   else {})}

    @property
    def eval_coefficients(self) -> dict[str, float]:
        return self.coefficients

    def loss_terms(self, params: Any, batch: dict, extra: Any, dropout_key) -> dict:
        with nn.logical_axis_rules(self.rules):
            out, _ = apply_model(self.model, params, batch, rng=dropout_key)
            return losses.pretraining_loss(out.mlm_logits, out.nsp_logits, batch)

    def eval_step(self, params: Any, batch: dict) -> dict:
        """(sum, weight) pairs over one batch, in their reported order.

        MLM and (for NSP models) NSP loss and accuracy. All-zero padding rows count for nothing."""
        with nn.logical_axis_rules(self.rules):
            out, _ = apply_model(self.model, params, batch)
        heads = [("mlm", out.mlm_logits, batch["masked_lm_ids"], batch["masked_lm_weights"])]
        if out.nsp_logits is not None:
            heads.append(("nsp", out.nsp_logits, batch["next_sentence_labels"], batch.get(
                "next_sentence_weights", (batch["input_mask"][:, 0] > 0).astype(jnp.float32))))
        sums = collections.OrderedDict()
        for name, logits, labels, weights in heads:
            sums.update({f"{name}_loss": losses.weighted_cross_entropy(logits, labels, weights),
                         f"{name}_accuracy": losses.weighted_accuracy(logits, labels, weights)})
        return sums

    def models_beside(self, params: Any) -> dict:
        return {}


def jit_steps(objective: objectives.Objective, tx, partitioner: Partitioner,
              shardings: TrainState, grad_accum_steps: int = 1):
    """(train_step, eval_step) of a pretraining `objective`, jitted once with explicit shardings.

    The state is donated. train_step is `train_step.train_step` of the objective (taking its extra
    input, a teacher's parameters, as a third argument when it has one); eval_step is
    `objectives.jit_eval_step`'s."""
    train = train_step.jit_train_step(objective, tx, shardings, partitioner,
                                      grad_accum_steps=grad_accum_steps)
    return train, objectives.jit_eval_step(objective, shardings.params, partitioner)
