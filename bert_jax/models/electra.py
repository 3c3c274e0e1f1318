"""ELECTRA's two networks for replaced-token detection (Clark et al., 2020).

A small generator (an encoder with an MLM head) that fills the masked positions with tokens sampled
from its softmax, and the discriminator (`heads.ElectraForPreTraining`) that reads the result. The
loss on them is the pretraining objective's (`bert_jax.pretrain.electra`).

The generator has the discriminator's depth and `generator_size` of its width (hidden
size; FFN 4x hidden and one head per 64 dimensions, as google-research/electra builds it),
and reads the discriminator's embeddings: the word, position and token-type tables and
their LayerNorm are one set of parameters, with a projection of its own to its width
where that differs from the embedding width.

Their parameters: the discriminator as an ELECTRA model's ({"bert", "discriminator"},
what a workdir loads as) and `generator` ({"bert": its encoder less the shared tables,
"mlm"}); `full_generator` gives the generator as a model of its own (ElectraForMaskedLM).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.errors import UserError
from bert_jax.models.config import BertConfig
from bert_jax.models.encoder import BertModel, gather_positions
from bert_jax.models.heads import ElectraForPreTraining, MaskedLMHead

# The embedding parameters the generator reads from the discriminator's.
SHARED_EMBEDDINGS = ("word_embeddings", "position_embeddings", "token_type_embeddings",
                     "layer_norm")
# The model's optional inputs, passed through when the batch has them (packed rows).
_OPTIONAL_INPUTS = ("position_ids", "example_ids")


def generator_config(discriminator: BertConfig, size: float) -> BertConfig:
    """The generator of a discriminator: the same depth, `size` of its hidden size (rounded).

    FFN 4x that and one attention head per 64 dimensions (at least one), with the discriminator's
    embedding width (projected when it differs from the hidden size). ELECTRA-Small 256 -> 64 (1/4),
    Base 768 -> 256 (1/3), Large 1024 -> 256 (1/4)."""
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
    """`config` as an ELECTRA discriminator's; other families are refused.

    A BERT config becomes model_type "electra" (the same network; its classification head's
    gelu)."""
    if config.model_type == "electra":
        return config
    if config.model_type != "bert":
        raise UserError(f"objective 'electra' trains an ELECTRA (BERT-shaped) encoder, not "
                        f"model_type {config.model_type!r}: use a BERT preset or the "
                        "electra_* recipes")
    return config.replace(model_type="electra", pooler_act="gelu")


class Generator(nn.Module):
    """The generator: an encoder (no pooler) and an MLM head at the masked positions.

    [B, L] ids -> logits [B, P, V]. Called with its full parameters (`full_generator`), the shared
    embeddings included."""

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


def full_generator(params: dict) -> dict:
    """The generator's parameters with the discriminator's embedding tables in place.

    {"bert", "mlm"}, what `Generator` (and an ElectraForMaskedLM) reads."""
    gen, shared = params["generator"], params["bert"]["embeddings"]
    embeddings = {**{k: v for k, v in shared.items() if k in SHARED_EMBEDDINGS},
                  **gen["bert"].get("embeddings", {})}
    return {**gen, "bert": {**gen["bert"], "embeddings": embeddings}}


@dataclasses.dataclass(frozen=True)
class ElectraNetworks:
    """The discriminator and its generator, initialised and applied as one parameter tree.

    The tree is the module docstring's."""

    discriminator: ElectraForPreTraining
    generator: Generator

    @classmethod
    def build(cls, config: BertConfig, generator_size: float) -> "ElectraNetworks":
        disc = discriminator_config(config)
        return cls(ElectraForPreTraining(disc), Generator(generator_config(disc, generator_size)))

    def init(self, key: jax.Array, input_ids, input_mask, segment_ids,
             masked_lm_positions) -> dict:
        """{"params": the discriminator's and `generator` (less the shared tables)}.

        Logically partitioned like `nn.Module.init`'s."""
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

    def forward(self, params: dict, batch: dict, rng: jax.Array | None,
                sample_key: jax.Array) -> tuple:
        """(generator logits [B, P, V], discriminator logits [B, L] float32, labels [B, L]).

        labels: 1 where the discriminator's input, the masked positions filled with tokens sampled
        with `sample_key` (not differentiated), differs from the original text. Dropout when `rng`
        is given."""
        extra = {k: batch[k] for k in _OPTIONAL_INPUTS if k in batch}
        train = rng is not None
        gen_rng, disc_rng = jax.random.split(rng) if train else (None, None)
        mask, segments = batch["input_mask"], batch["segment_ids"]
        positions, weights = batch["masked_lm_positions"], batch["masked_lm_weights"]
        gen_logits = self.generator.apply(
            {"params": full_generator(params)}, batch["input_ids"], mask, segments,
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


def _put(ids: jax.Array, positions: jax.Array, weights: jax.Array,
         values: jax.Array) -> jax.Array:
    """ids [B, L] with values [B, P] at positions [B, P] where weights > 0.

    Padding predictions, weight 0, leave their position as it is."""
    ids = jnp.asarray(ids)
    rows = jnp.arange(ids.shape[0])[:, None]
    current = jnp.take_along_axis(ids, positions, axis=1)
    return ids.at[rows, positions].set(jnp.where(weights > 0, values, current))
