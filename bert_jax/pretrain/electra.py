"""ELECTRA's replaced-token detection (Clark et al., 2020) as a pretraining objective.

With `--config.objective=electra`, the generator fills the masked positions with tokens sampled from
its softmax and the discriminator learns for every real token whether it was replaced (the networks:
`bert_jax.models.electra`). Both train jointly in one step:

    loss = generator MLM cross-entropy + disc_weight * discriminator sigmoid cross-entropy

Sampling is not differentiated. Each checkpoint also writes the generator as a model of
its own (ElectraForMaskedLM) in WORKDIR/generator (`Electra.models_beside`); the workdir
itself is the discriminator.
"""

from __future__ import annotations

import collections
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.host.folders import PRETRAINING_WORKDIR
from bert_jax.models import losses
from bert_jax.models.electra import ElectraNetworks, full_generator


@dataclasses.dataclass(frozen=True)
class Electra:
    """ELECTRA's objective (`train.objective.Objective`) on its `networks`.

    The discriminator's loss is weighed by `disc_weight`. `rules`: the run's logical axis rules."""

    networks: ElectraNetworks
    disc_weight: float
    rules: tuple = ()
    extra = None  # no step input beside the batch
    extra_shardings = None

    @property
    def coefficients(self) -> dict[str, float]:
        return {"mlm_loss": 1.0, "disc_loss": self.disc_weight}

    @property
    def eval_coefficients(self) -> dict[str, float]:
        return self.coefficients

    def loss_terms(self, params: dict, batch: dict, extra, dropout_key) -> dict:
        with nn.logical_axis_rules(self.rules):
            return self.terms(params, batch, dropout_key)

    def terms(self, params: dict, batch: dict, rng: jax.Array | None) -> dict:
        """The loss terms of one batch, {name: (weighted sum, weight)}.

        The generator's mlm_loss / mlm_accuracy over the masked positions, the discriminator's
        disc_loss / disc_accuracy over the real tokens, and `replaced` (the share of real tokens the
        generator changed). `rng` draws dropout and the samples; None: no dropout, the samples drawn
        with key 0 (evaluation)."""
        sample_key, dropout_key = (jax.random.split(rng) if rng is not None
                                   else (jax.random.key(0), None))
        gen_logits, disc_logits, labels = self.networks.forward(params, batch, dropout_key,
                                                                sample_key)
        real = batch["input_mask"].astype(jnp.float32)
        count = jnp.sum(real)
        correct = ((disc_logits > 0) == (labels > 0)).astype(jnp.float32)
        return {**losses.pretraining_loss(gen_logits, None, batch),
                "disc_loss": (jnp.sum(_sigmoid_cross_entropy(disc_logits, labels) * real),
                              count),
                "disc_accuracy": (jnp.sum(correct * real), count),
                "replaced": (jnp.sum(labels), count)}

    def eval_step(self, params: dict, batch: dict) -> dict:
        """`terms` without dropout, in their reported order.

        (sum, weight) pairs that `objective.evaluate` adds up over batches."""
        with nn.logical_axis_rules(self.rules):
            return collections.OrderedDict(self.terms(params, batch, None))

    def models_beside(self, params: dict) -> dict:
        """The generator, {"bert", "mlm"}.

        `convert --to_hf` writes it as transformers' ElectraForMaskedLM."""
        return {PRETRAINING_WORKDIR.generator: (self.networks.generator.config,
                                                full_generator(params))}


def _sigmoid_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per-element binary cross-entropy of logits against labels in {0, 1}."""
    return jax.nn.softplus(logits) - labels * logits
