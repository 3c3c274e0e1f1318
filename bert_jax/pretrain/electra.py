"""ELECTRA's replaced-token detection (Clark et al., 2020) as a pretraining objective
(`--config.objective=electra`): a small generator (an encoder with an MLM head) fills the
masked positions with tokens sampled from its softmax, and the discriminator learns for
every real token whether it was replaced. Both train jointly in one step:

    loss = generator MLM cross-entropy + disc_weight * discriminator sigmoid cross-entropy

The generator has the discriminator's depth and `generator_size` of its width (hidden
size; FFN 4x hidden and one head per 64 dimensions, as google-research/electra builds it),
and reads the discriminator's embeddings: the word, position and token-type tables and
their LayerNorm are one set of parameters, with a projection of its own to its width
where that differs from the embedding width. Sampling is not differentiated.

The state's params: the discriminator as an ELECTRA model's ({"bert", "discriminator"},
what a workdir loads as) and `generator` ({"bert": its encoder less the shared tables,
"mlm"}); `with_generator` writes the generator as a model of its own (ElectraForMaskedLM)
with each checkpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

from bert_jax.errors import UserError
from bert_jax.host import paths
from bert_jax.host.folders import PRETRAINING_WORKDIR
from bert_jax.models import losses
from bert_jax.models.config import BertConfig
from bert_jax.models.encoder import BertModel, gather_positions
from bert_jax.models.heads import ElectraForPreTraining, MaskedLMHead
from bert_jax.train import multihost, train_step
from bert_jax.train.sharding import Partitioner
from bert_jax.train.train_state import TrainState
from bert_jax.weights import pretrained

# The embedding parameters the generator reads from the discriminator's.
SHARED_EMBEDDINGS = ("word_embeddings", "position_embeddings", "token_type_embeddings",
                     "layer_norm")
# The model's optional inputs, passed through when the batch has them (packed rows).
_OPTIONAL_INPUTS = ("position_ids", "example_ids")


def generator_config(discriminator: BertConfig, size: float) -> BertConfig:
    """The generator of a discriminator: the same depth, `size` of its hidden size
    (rounded), FFN 4x that and one attention head per 64 dimensions (at least one), with
    the discriminator's embedding width (projected when it differs from the hidden size).
    ELECTRA-Small 256 -> 64 (1/4), Base 768 -> 256 (1/3), Large 1024 -> 256 (1/4)."""
    hidden = int(round(discriminator.hidden_size * size))
    if hidden < 1:
        raise UserError(f"generator_size {size} leaves the generator no hidden units "
                        f"(discriminator hidden size {discriminator.hidden_size})")
    width = discriminator.embedding_width
    return discriminator.replace(hidden_size=hidden, intermediate_size=4 * hidden,
                                 num_attention_heads=max(1, hidden // 64),
                                 num_key_value_heads=None,
                                 embedding_size=None if width == hidden else width)


def discriminator_config(config: BertConfig) -> BertConfig:
    """`config` as an ELECTRA discriminator's: a BERT config becomes model_type "electra"
    (the same network; its classification head's gelu); other families are refused."""
    if config.model_type == "electra":
        return config
    if config.model_type != "bert":
        raise UserError(f"objective 'electra' trains an ELECTRA (BERT-shaped) encoder, not "
                        f"model_type {config.model_type!r}: use a BERT preset or the "
                        "electra_* recipes")
    return config.replace(model_type="electra", pooler_act="gelu")


class Generator(nn.Module):
    """The generator: an encoder (no pooler) and an MLM head at the masked positions,
    [B, L] ids -> logits [B, P, V]. Called with its full parameters (`Electra.full_generator`),
    the shared embeddings included."""

    config: BertConfig

    def setup(self):
        self.bert = BertModel(self.config, add_pooling_layer=False)
        self.mlm = MaskedLMHead(self.config)

    def __call__(self, input_ids, input_mask, segment_ids, masked_lm_positions,
                 position_ids=None, example_ids=None, *, deterministic: bool = True):
        out = self.bert(input_ids, input_mask, segment_ids, position_ids, example_ids,
                        deterministic=deterministic)
        states = gather_positions(out.sequence_output, masked_lm_positions)
        return self.mlm(states, self.bert.embeddings.word_embeddings.embedding)


@dataclasses.dataclass(frozen=True)
class Electra:
    """The discriminator and generator modules and the loss weight (static parts of the
    step). `init` and `terms` are the pretraining model's (`pretrain.setup.Setup`)."""

    discriminator: ElectraForPreTraining
    generator: Generator
    disc_weight: float

    @classmethod
    def build(cls, config: BertConfig, generator_size: float, disc_weight: float) -> "Electra":
        disc = discriminator_config(config)
        return cls(ElectraForPreTraining(disc), Generator(generator_config(disc, generator_size)),
                   float(disc_weight))

    def init(self, key: jax.Array, input_ids, input_mask, segment_ids,
             masked_lm_positions) -> dict:
        """{"params": the discriminator's and `generator` (less the shared tables)},
        logically partitioned like `nn.Module.init`'s."""
        disc_key, gen_key = jax.random.split(key)
        params = dict(self.discriminator.init(disc_key, input_ids, input_mask,
                                              segment_ids)["params"])
        gen = dict(self.generator.init(gen_key, input_ids, input_mask, segment_ids,
                                       masked_lm_positions)["params"])
        own = {k: v for k, v in gen["bert"]["embeddings"].items() if k not in SHARED_EMBEDDINGS}
        gen["bert"] = {k: v for k, v in gen["bert"].items() if k != "embeddings"}
        if own:  # its projection, when its width differs from the embeddings'
            gen["bert"]["embeddings"] = own
        return {"params": {**params, "generator": gen}}

    @staticmethod
    def full_generator(params: dict) -> dict:
        """The generator's parameters with the discriminator's embedding tables in place:
        {"bert", "mlm"}, what `Generator` (and an ElectraForMaskedLM) reads."""
        gen, shared = params["generator"], params["bert"]["embeddings"]
        embeddings = {**{k: v for k, v in shared.items() if k in SHARED_EMBEDDINGS},
                      **gen["bert"].get("embeddings", {})}
        return {**gen, "bert": {**gen["bert"], "embeddings": embeddings}}

    def _outputs(self, params: dict, batch: dict, rng: jax.Array | None,
                 sample_key: jax.Array) -> tuple:
        """(generator logits [B, P, V], discriminator logits [B, L], labels [B, L]: 1 where
        the discriminator's input differs from the original text); dropout when `rng`."""
        extra = {k: batch[k] for k in _OPTIONAL_INPUTS if k in batch}
        train = rng is not None
        gen_rng, disc_rng = jax.random.split(rng) if train else (None, None)
        mask, segments = batch["input_mask"], batch["segment_ids"]
        positions, weights = batch["masked_lm_positions"], batch["masked_lm_weights"]
        gen_logits = self.generator.apply(
            {"params": self.full_generator(params)}, batch["input_ids"], mask, segments,
            positions, **extra, deterministic=not train,
            rngs={"dropout": gen_rng} if train else {})
        sampled = jax.random.categorical(
            sample_key, jax.lax.stop_gradient(gen_logits).astype(jnp.float32), axis=-1)
        original = _put(batch["input_ids"], positions, weights, batch["masked_lm_ids"])
        corrupted = _put(batch["input_ids"], positions, weights, sampled.astype(jnp.int32))
        disc_params = {k: v for k, v in params.items() if k != "generator"}
        disc_logits, _ = self.discriminator.apply(
            {"params": disc_params}, corrupted, mask, segments, **extra,
            deterministic=not train, rngs={"dropout": disc_rng} if train else {})
        labels = ((corrupted != original) & (mask > 0)).astype(jnp.float32)
        return gen_logits, disc_logits.astype(jnp.float32), labels

    def terms(self, params: dict, batch: dict, rng: jax.Array | None) -> dict:
        """The loss terms of one batch, {name: (weighted sum, weight)}: the generator's
        mlm_loss / mlm_accuracy over the masked positions, the discriminator's disc_loss /
        disc_accuracy over the real tokens, and `replaced` (the share of real tokens the
        generator changed). `rng` draws dropout and the samples; None: no dropout, the
        samples drawn with key 0 (evaluation)."""
        sample_key, dropout_key = (jax.random.split(rng) if rng is not None
                                   else (jax.random.key(0), None))
        gen_logits, disc_logits, labels = self._outputs(params, batch, dropout_key, sample_key)
        real = batch["input_mask"].astype(jnp.float32)
        count = jnp.sum(real)
        correct = ((disc_logits > 0) == (labels > 0)).astype(jnp.float32)
        return {**losses.pretraining_loss(gen_logits, None, batch),
                "disc_loss": (jnp.sum(_sigmoid_cross_entropy(disc_logits, labels) * real),
                              count),
                "disc_accuracy": (jnp.sum(correct * real), count),
                "replaced": (jnp.sum(labels), count)}

    def coefficients(self) -> dict[str, float]:
        return {"mlm_loss": 1.0, "disc_loss": self.disc_weight}

    def eval_sums(self, params: dict, batch: dict) -> dict:
        """Weighted sums over one batch without dropout (combine across batches, then
        divide; `steps.evaluate`): the generator's MLM and the discriminator's loss sums,
        correct counts and counts, and the replaced tokens."""
        terms = self.terms(params, batch, None)
        out = {"disc_replaced": terms["replaced"][0]}
        for name in ("mlm", "disc"):
            loss, count = terms[f"{name}_loss"]
            out.update({f"{name}_loss_sum": loss, f"{name}_correct": terms[f"{name}_accuracy"][0],
                        f"{name}_count": count})
        return out


def _put(ids: jax.Array, positions: jax.Array, weights: jax.Array,
         values: jax.Array) -> jax.Array:
    """ids [B, L] with values [B, P] at positions [B, P] where weights > 0 (padding
    predictions, weight 0, leave their position as it is)."""
    ids = jnp.asarray(ids)
    rows = jnp.arange(ids.shape[0])[:, None]
    current = jnp.take_along_axis(ids, positions, axis=1)
    return ids.at[rows, positions].set(jnp.where(weights > 0, values, current))


def _sigmoid_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per-element binary cross-entropy of logits against labels in {0, 1}."""
    return jax.nn.softplus(logits) - labels * logits


def jit_electra_steps(electra: Electra, tx, partitioner: Partitioner, shardings: TrainState,
              grad_accum_steps: int = 1):
    """(train_step, eval_step) of the ELECTRA objective, jitted once with explicit
    shardings as `steps.jit_steps` does; the state is donated."""
    rules = partitioner.rules

    def loss_fn(params, batch, _extra, key):
        with nn.logical_axis_rules(rules):
            return electra.terms(params, batch, key)

    def eval_fn(params, batch):
        with nn.logical_axis_rules(rules):
            return electra.eval_sums(params, batch)

    train = train_step.jit_train_step(loss_fn, electra.coefficients(), tx, shardings,
                                      partitioner, grad_accum_steps=grad_accum_steps)
    evaluate = jax.jit(eval_fn, in_shardings=(shardings.params, partitioner.batch_sharding),
                       out_shardings=partitioner.replicated)
    return train, evaluate


def with_generator(checkpoint_meta: Callable[[Any], dict], model: Any, workdir: str,
                   tokenizer, message: Callable[[str], None]) -> Callable[[Any], dict]:
    """`checkpoint_meta` (`lifecycle.Job.train`'s: loop -> the checkpoint's meta, called by
    every process at each checkpoint, a stop's included), which for an ELECTRA run first
    writes the generator: WORKDIR/generator, a model directory of its own ({"bert", "mlm"}:
    `convert --to_hf` writes it as transformers' ElectraForMaskedLM), replaced atomically
    (a temporary sibling, then renamed), so a stopped or preempted run's generator is its
    last checkpoint's. The workdir itself is the discriminator. Other objectives' (`model`
    not an `Electra`): `checkpoint_meta` itself."""
    if not isinstance(model, Electra):
        return checkpoint_meta
    path = paths.join(workdir, PRETRAINING_WORKDIR.generator)

    def meta_and_generator(loop) -> dict:
        # Host copies on every process (the parameters may span processes); the
        # generator's alone, not the discriminator's.
        params = multihost_utils.process_allgather(
            Electra.full_generator(loop.state.params), tiled=True)
        if multihost.is_primary():
            pretrained.save(path, model.generator.config, params, tokenizer=tokenizer,
                            overwrite=True)
            if loop.is_last:
                message(f"wrote the generator to {path}")
        return checkpoint_meta(loop)
    return meta_and_generator
