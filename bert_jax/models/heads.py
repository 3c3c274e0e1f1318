"""BERT with task heads.

Pretraining (MLM + NSP, or MLM only; ELECTRA's discriminator), classification/regression, token
tagging, span question answering and multiple choice.

Every model here owns a `bert` submodule (`BertModel`), so the encoder's
parameters sit under `params['bert']` whatever the head, and a fine-tuning
run restores exactly that subtree.
"""

from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from bert_jax.models.activations import activation
from bert_jax.models.blocks import dense_init, layer_norm, zeros_init
from bert_jax.models.config import BertConfig, check_choice
from bert_jax.models.dropout import Dropout
from bert_jax.models.embeddings import embedding_axis
from bert_jax.models.encoder import BertModel, BertOutput, gather_positions, mean_pool

Array = jax.Array


def _dense(config: BertConfig, features: int, out_axis: str, name: str,
           bias: tuple[float, ...] | None = None, use_bias: bool = True) -> nn.Dense:
    bias_init = zeros_init((out_axis,)) if bias is None else nn.with_logical_partitioning(
        lambda key, shape, dtype=jnp.float32: jnp.asarray(bias, dtype).reshape(shape),
        (out_axis,))
    return nn.Dense(features, dtype=config.dtype, param_dtype=config.param_dtype,
                    kernel_init=dense_init(config, ("embed", out_axis)),
                    bias_init=bias_init, use_bias=use_bias, name=name)


class MaskedLMHead(nn.Module):
    """Dense + activation + LayerNorm, then the tied decoder: [..., H] -> [..., V].

    The decoder is tied to the word embeddings, with its own output bias. ALBERT's dense maps H to
    the embedding width E, which its decoder reads. ModernBERT's is the same head with the dense's
    bias as the encoder's (`use_bias`) and the LayerNorm's (`norm_bias`). `mlm_transform=False`
    (EuroBERT): a linear decoder of its own, nothing before it."""

    config: BertConfig

    @nn.compact
    def __call__(self, x: Array, word_embeddings: Array) -> Array:
        c = self.config
        if not c.mlm_transform:
            logits = nn.Dense(c.vocab_size, dtype=c.dtype, param_dtype=c.param_dtype,
                              use_bias=c.use_bias, kernel_init=dense_init(c, ("embed", "vocab")),
                              bias_init=zeros_init(("vocab",)), name="decoder")(x)
            return nn.with_logical_constraint(
                logits, ("activation_batch", "activation_length", "activation_vocab"))
        width = embedding_axis(c)
        x = _dense(c, c.embedding_width, width if c.factorized_embeddings else "mlp",
                   "transform", use_bias=c.use_bias)(x)
        x = layer_norm(c, "transform_layer_norm", width)(activation(c.hidden_act)(x))
        bias = self.param("output_bias", zeros_init(("vocab",)), (c.vocab_size,),
                          c.param_dtype)
        logits = jnp.einsum("...h,vh->...v", x, word_embeddings.astype(c.dtype))
        logits = nn.with_logical_constraint(
            logits, ("activation_batch", "activation_length", "activation_vocab"))
        return logits + bias.astype(c.dtype)


@flax.struct.dataclass
class PreTrainingOutput:
    """The pretraining model's logits.

    mlm_logits [B, P, V] at `masked_lm_positions` (or [B, L, V] for every position); nsp_logits
    [B, 2], or [B, K, 2] for packed rows; None for an MLM-only model."""

    mlm_logits: Array
    nsp_logits: Array | None
    encoder: BertOutput


class BertForPreTraining(nn.Module):
    """BERT's pretraining model.

    The MLM head runs only at the masked positions when they are given, which saves most of the
    [B, L, V] decoder matmul. `next_sentence_prediction=False`: MLM only, no `nsp` parameters (the
    pooler stays, so the encoder's parameters are those of any BERT). For ALBERT the `nsp` head is
    its sentence-order head (SOP), the same 2-way classifier on the pooled [CLS]: which task it
    learns is the data's (`create-data --sentence_order_prediction`)."""

    config: BertConfig
    next_sentence_prediction: bool = True
    pooler: bool = True  # False: an encoder saved without one (a states-only teacher's)

    def setup(self):
        self.bert = BertModel(self.config, add_pooling_layer=self.pooler)
        self.mlm = MaskedLMHead(self.config)
        if self.next_sentence_prediction:
            self.nsp = _dense(self.config, 2, "classes", "nsp")

    def __call__(self, input_ids, input_mask=None, segment_ids=None, masked_lm_positions=None,
                 position_ids=None, example_ids=None, next_sentence_positions=None, *,
                 deterministic: bool = True) -> PreTrainingOutput:
        examples = None if next_sentence_positions is None else next_sentence_positions.shape[1]
        out = self.bert(input_ids, input_mask, segment_ids, position_ids, example_ids,
                        max_examples=examples, deterministic=deterministic)
        states = out.sequence_output
        if masked_lm_positions is not None:
            states = gather_positions(states, masked_lm_positions)
        mlm_logits = self.mlm(states, self.bert.embeddings.word_embeddings.embedding)
        if not self.next_sentence_prediction:
            return PreTrainingOutput(mlm_logits, None, out)
        pooled = out.pooled_output
        if next_sentence_positions is not None:  # packed rows: one [CLS] per example
            pooled = self.bert.pool(gather_positions(out.sequence_output,
                                                     next_sentence_positions))
        return PreTrainingOutput(mlm_logits, self.nsp(pooled), out)


class ElectraDiscriminatorHead(nn.Module):
    """ELECTRA's replaced-token detector: [..., H] -> one logit per token, [...].

    Dense + activation + a dense to the logit (positive: replaced)."""

    config: BertConfig

    @nn.compact
    def __call__(self, x: Array) -> Array:
        c = self.config
        x = activation(c.hidden_act)(_dense(c, c.hidden_size, "mlp", "dense")(x))
        return _dense(c, 1, "classes", "prediction")(x)[..., 0]


class ElectraForPreTraining(nn.Module):
    """ELECTRA's discriminator (transformers' ElectraForPreTraining).

    The encoder, no pooler, and `ElectraDiscriminatorHead` on every position. Returns (logits
    [B, L], the encoder's output). Its generator is `BertForPreTraining` without NSP."""

    config: BertConfig

    def setup(self):
        self.bert = BertModel(self.config, add_pooling_layer=False)
        self.discriminator = ElectraDiscriminatorHead(self.config)

    def __call__(self, input_ids, input_mask=None, segment_ids=None, position_ids=None,
                 example_ids=None, *, deterministic: bool = True) -> tuple[Array, BertOutput]:
        out = self.bert(input_ids, input_mask, segment_ids, position_ids, example_ids,
                        deterministic=deterministic)
        return self.discriminator(out.sequence_output), out


# How a sequence classifier reduces the last hidden states to one vector:
# "pooler" is BERT's tanh layer on [CLS]; "mean" averages the example's tokens, the
# sentence embedding that sentence-transformers models (all-MiniLM, ...) were trained for.
CLASSIFIER_POOLINGS = ("pooler", "mean")


class BertForSequenceClassification(nn.Module):
    """Pooled sequence -> dropout -> dense: logits [B, num_labels]; `num_labels=1` is regression.

    [B, K, num_labels] for packed rows. `pooling`: one of CLASSIFIER_POOLINGS. With the pooler on
    unpacked rows the last layer computes [CLS] alone (`BertModel.pooled_only`) unless
    `every_position` (for callers that capture every layer's states, as distillation does)."""

    config: BertConfig
    num_labels: int
    pooling: str = "pooler"
    every_position: bool = False

    @nn.compact
    def __call__(self, input_ids, input_mask=None, segment_ids=None, *, position_ids=None,
                 example_ids=None, cls_positions=None, deterministic: bool = True) -> Array:
        check_choice("pooling", self.pooling, CLASSIFIER_POOLINGS)
        packed = cls_positions is not None  # [B, K] positions of each example's [CLS]
        pooler = self.pooling == "pooler"
        bert = BertModel(self.config, add_pooling_layer=pooler, name="bert",
                         pooled_only=pooler and not packed and not self.every_position)
        out = bert(input_ids, input_mask, segment_ids, position_ids, example_ids,
                   max_examples=cls_positions.shape[1] if packed else None,
                   deterministic=deterministic)
        if self.pooling == "mean":
            pooled = mean_pool(out.sequence_output, input_mask, example_ids if packed else None,
                               cls_positions.shape[1] if packed else None)
        elif packed:
            pooled = bert.pool(gather_positions(out.sequence_output, cls_positions))
        else:
            pooled = out.pooled_output
        pooled = Dropout(self.config.hidden_dropout_prob)(pooled, deterministic=deterministic)
        return _dense(self.config, self.num_labels, "classes", "classifier")(pooled)


class BertForTokenClassification(nn.Module):
    """Per-token logits [B, L, num_labels] from the last hidden states.

    `label_bias`: the classifier's initial bias (e.g. the log frequencies of the labels), zeros if
    None."""

    config: BertConfig
    num_labels: int
    label_bias: tuple[float, ...] | None = None

    @nn.compact
    def __call__(self, input_ids, input_mask=None, segment_ids=None, *, position_ids=None,
                 example_ids=None, deterministic: bool = True) -> Array:
        out = BertModel(self.config, add_pooling_layer=False, name="bert")(
            input_ids, input_mask, segment_ids, position_ids, example_ids,
            deterministic=deterministic)
        x = Dropout(self.config.hidden_dropout_prob)(out.sequence_output,
                                                     deterministic=deterministic)
        return _dense(self.config, self.num_labels, "classes", "classifier", self.label_bias)(x)


class BertForQuestionAnswering(nn.Module):
    """Span extraction: (start_logits, end_logits), each [B, L]."""

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, input_mask=None, segment_ids=None, *,
                 deterministic: bool = True) -> tuple[Array, Array]:
        out = BertModel(self.config, add_pooling_layer=False, name="bert")(
            input_ids, input_mask, segment_ids, deterministic=deterministic)
        logits = _dense(self.config, 2, "classes", "qa_outputs")(out.sequence_output)
        return logits[..., 0], logits[..., 1]


class BertForMultipleChoice(nn.Module):
    """Inputs [B, C, L] (C choices) -> logits [B, C].

    Inputs [B, L] are one choice each ([B, 1, L]): what the fine-tuning trainer's shape-only `init`
    passes. The last layer computes [CLS] alone unless `every_position` (see
    BertForSequenceClassification)."""

    config: BertConfig
    every_position: bool = False

    @nn.compact
    def __call__(self, input_ids, input_mask=None, segment_ids=None, *,
                 deterministic: bool = True) -> Array:
        if input_ids.ndim == 2:
            one = lambda x: None if x is None else x[:, None, :]
            input_ids, input_mask, segment_ids = map(one, (input_ids, input_mask, segment_ids))
        batch, choices, length = input_ids.shape
        flat = lambda x: None if x is None else x.reshape(batch * choices, length)
        out = BertModel(self.config, name="bert", pooled_only=not self.every_position)(
            flat(input_ids), flat(input_mask), flat(segment_ids), deterministic=deterministic)
        pooled = Dropout(self.config.hidden_dropout_prob)(out.pooled_output,
                                                          deterministic=deterministic)
        logits = _dense(self.config, 1, "classes", "classifier")(pooled)
        return logits.reshape(batch, choices)
