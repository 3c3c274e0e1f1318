"""The encoder's input embeddings: word, position and token-type tables.

Each is an option of the config: rotary models have no position table, `type_vocab_size=0` no token
types, ALBERT's factorized embeddings a projection to the hidden size."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.blocks import dense_init, layer_norm, zeros_init
from bert_jax.models.config import BertConfig
from bert_jax.models.dropout import Dropout

Array = jax.Array


def embedding_axis(config: BertConfig) -> str:
    """The logical name of the token embeddings' width.

    A factorized width (ALBERT's E) is "factor_embed" (its [E, H] projection shards H as "embed"; a
    mesh axis can shard one dimension only)."""
    return "factor_embed" if config.factorized_embeddings else "embed"


def one_hot_lookup(table: Array, ids: Array, dtype) -> Array:
    """table[ids] as a one-hot matmul: [R, H] x [...] -> [..., H].

    For tables with few rows (token types, positions): the gradient of a gather is a
    scatter-add of every token's row gradient onto those few rows, which GPUs
    serialise with atomics (half of a BERT-base step on an H100, issue 16); the
    gradient of this matmul is a small matmul. HIGHEST precision keeps it an exact
    lookup where float32 matmuls would otherwise run in TF32 or bf16 passes.
    """
    one_hot = jax.nn.one_hot(ids, table.shape[0], dtype=dtype)
    return jnp.einsum("...r,rh->...h", one_hot, table.astype(dtype),
                      precision=jax.lax.Precision.HIGHEST)


class Embeddings(nn.Module):
    """Word + learned absolute position + token type embeddings, LayerNorm, dropout.

    Factorized embeddings (ALBERT) are of width `embedding_size`, then projected to hidden_size.
    Rotary models have no position table (their positions act in attention), `type_vocab_size=0` no
    token types.

    Only the word embeddings are a gather: with ~30k rows a one-hot matmul would
    cost more than a whole layer, and its gradient's scatter spreads over many rows
    so it does not contend. Positions and token types avoid the gather (see
    `one_hot_lookup`); the parameters are the same `nn.Embed` tables either way.
    """

    config: BertConfig

    def setup(self):
        c = self.config
        width = embedding_axis(c)
        embed = functools.partial(nn.Embed, features=c.embedding_width, dtype=c.dtype,
                                  param_dtype=c.param_dtype)
        self.word_embeddings = embed(
            c.vocab_size, embedding_init=dense_init(c, ("vocab", width)))
        if not c.rotary:
            self.position_embeddings = embed(
                c.max_position_embeddings, embedding_init=dense_init(c, ("position", width)))
        if c.type_vocab_size:
            self.token_type_embeddings = embed(
                c.type_vocab_size, embedding_init=dense_init(c, ("token_type", width)))
        if c.embedding_norm:
            self.layer_norm = layer_norm(c, "layer_norm", width)
        self.dropout = Dropout(c.hidden_dropout_prob)
        if c.factorized_embeddings:
            self.projection = nn.Dense(c.hidden_size, dtype=c.dtype, param_dtype=c.param_dtype,
                                       kernel_init=dense_init(c, (width, "embed")),
                                       bias_init=zeros_init(("embed",)))

    def __call__(self, input_ids, segment_ids, position_ids, deterministic: bool):
        """position_ids None: 0..L-1 in every row, a slice of the table broadcast over the batch.

        Its gradient is a sum over the batch."""
        c = self.config
        x = self.word_embeddings(input_ids)
        if not c.rotary:
            x = x + self._positions(input_ids, position_ids)
        if c.type_vocab_size == 1:  # RoBERTa's one row: every token's, whatever its segment
            x = x + self.token_type_embeddings.embedding[0].astype(c.dtype)
        elif c.type_vocab_size:
            x = x + one_hot_lookup(self.token_type_embeddings.embedding, segment_ids, c.dtype)
        if c.embedding_norm:
            x = self.layer_norm(x)
        x = self.dropout(x, deterministic=deterministic)
        if c.factorized_embeddings:
            x = self.projection(x)
        return nn.with_logical_constraint(
            x, ("activation_batch", "activation_length", "activation_embed"))

    def _positions(self, input_ids, position_ids):
        """Rows position_offset + 0..L-1 of the table (RoBERTa's start at 2)."""
        positions, offset = self.position_embeddings.embedding, self.config.position_offset
        if position_ids is None:
            # lax.slice_in_dim, not [:L]: L may be symbolic (bert-jax export).
            length = input_ids.shape[-1]
            return jax.lax.slice_in_dim(positions, offset, offset + length).astype(
                self.config.dtype)[None]
        return one_hot_lookup(positions, position_ids + offset, self.config.dtype)

    def attend(self, x: Array) -> Array:
        """Logits against the word embedding table (the tied MLM decoder).

        [..., E] -> [..., V] (E = hidden_size but for factorized embeddings)."""
        return self.word_embeddings.attend(x)
