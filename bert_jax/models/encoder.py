"""The BERT encoder as pure Flax linen modules.

Embeddings, a stack of layers (attention and feed-forward with residuals around them), a pooler.

Every parameter carries logical axis names (`vocab`, `embed`, `heads`, `kv`,
`mlp`, `layers`, ...) and activations are constrained with `activation_*`
names; `bert_jax.train.sharding` maps both onto a device mesh. Nothing here names a
mesh axis, reads a file or knows about an optimizer.

A family is a set of the config's options, each built in one place: the embeddings
(bert_jax/models/embeddings.py), attention (attention.py), the norm and the feed-forward
(blocks.py), where the norms sit (`post_norm`, `pre_norm`) and ALBERT's shared layers
(`Encoder._shared_groups`).

Shapes: B batch, L sequence length, H hidden size, N heads, D head size.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from bert_jax.models.activations import activation
from bert_jax.models.attention import SelfAttention, fused_path, make_mask
from bert_jax.models.blocks import (
    dense_init,
    feed_forward,
    layer_kind,
    layer_norm,
    pick,
    zeros_init,
)
from bert_jax.models.config import BertConfig
from bert_jax.models.dropout import Dropout
from bert_jax.models.embeddings import Embeddings

Array = jax.Array

EMBED_AXES = ("activation_batch", "activation_length", "activation_embed")


def post_norm(x, queries, attend: Callable, feed_forward: Callable, norms, dropout):
    """BERT's layer: each sublayer's output added to its input, then normalised.

    `queries`: the positions computed (x, or [CLS]'s for a pooler-only last layer); `norms`: (after
    attention, after the feed-forward). Returns (states, probabilities)."""
    attn, probs = attend(x)
    x = nn.with_logical_constraint(norms[0](queries + dropout(attn)), EMBED_AXES)
    return norms[1](x + dropout(feed_forward(x))), probs


def pre_norm(x, queries, attend: Callable, feed_forward: Callable, norms, dropout, is_first):
    """ModernBERT's layer: each sublayer reads normalised states, its output added to its input.

    The first layer has no norm before attention when the embeddings are normalised (`is_first`:
    static, or traced under a scan; False otherwise, as EuroBERT); the parameter exists in every
    layer, so that scanned layers share one structure."""
    normed = pick(is_first, x, norms[0](x))
    attn, probs = attend(normed)
    x = nn.with_logical_constraint(queries + dropout(attn), EMBED_AXES)
    return x + dropout(feed_forward(norms[1](x))), probs


class Layer(nn.Module):
    """One transformer layer: attention and feed-forward, normalised after or before.

    After (`post_norm`, BERT) or before (`pre_norm`, ModernBERT). `layer_index`: the layer's place
    in the stack (static unrolled, traced under `nn.scan`), which decides the sliding window and the
    rotary base.

    Returns the new hidden states and, for `nn.scan`, the per-layer outputs
    (hidden states and attention probabilities) that the caller asked for.
    `cls_only`: only position 0 ([CLS]) is computed past the keys and values, which
    still see every token; the output is [B, 1, H] (a pooler-only last layer).
    """

    config: BertConfig
    output_hidden_states: bool = False
    output_attentions: bool = False
    cls_only: bool = False

    @nn.compact
    def __call__(self, x, mask, deterministic: bool, layer_index=0):
        c = self.config
        dropout = functools.partial(Dropout(c.hidden_dropout_prob), deterministic=deterministic)
        if self.cls_only:
            mask = mask.for_first_query()
        attention = SelfAttention(c, fused_path(c, self.output_attentions), name="attention")

        def attend(h):
            return attention(h, mask, deterministic, h[:, :1] if self.cls_only else h,
                             layer_index)

        norms = (layer_norm(c, "attention_layer_norm"), layer_norm(c, "output_layer_norm"))
        is_first = layer_kind(c, layer_index)[0] if c.embedding_norm else False
        residuals = (functools.partial(pre_norm, is_first=is_first)
                     if c.pre_norm else post_norm)
        x, probs = residuals(x, x[:, :1] if self.cls_only else x, attend,
                             functools.partial(feed_forward, c), norms, dropout)
        x = nn.with_logical_constraint(x, EMBED_AXES)
        extras = (x if self.output_hidden_states else None,
                  probs if self.output_attentions else None)
        return x, extras


_REMAT_POLICIES = {
    "full": None,  # save nothing, recompute the whole layer in the backward pass
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_with_no_batch_dims": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _remat(module_cls, config: BertConfig, static_argnums: tuple[int, ...]):
    """`module_cls` recomputed in the backward pass as `remat_policy` says (as is for "none").

    `static_argnums`: `deterministic`, and an unrolled layer's index."""
    if config.remat_policy == "none":
        return module_cls
    return nn.remat(module_cls, policy=_REMAT_POLICIES[config.remat_policy],
                    static_argnums=static_argnums, prevent_cse=not config.scan_layers)


def _per_layer(extras, hidden_states: bool, attentions: bool):
    """Each layer's (hidden states, probabilities) as (all hidden states, all probabilities).

    None for what was not asked for."""
    return (tuple(h for h, _ in extras) if hidden_states else None,
            tuple(p for _, p in extras) if attentions else None)


class LayerGroup(nn.Module):
    """ALBERT's group of `inner_group_num` layers (`layer_0`, ...), applied in turn.

    The encoder applies a group several times with the same parameters. Returns the new hidden
    states and, like `Layer`, the per-layer outputs asked for (tuples over the group's layers)."""

    config: BertConfig
    output_hidden_states: bool = False
    output_attentions: bool = False

    @nn.compact
    def __call__(self, x, mask, deterministic: bool):
        extras = []
        for k in range(self.config.inner_group_num):
            x, step = Layer(self.config, self.output_hidden_states, self.output_attentions,
                            name=f"layer_{k}")(x, mask, deterministic)
            extras.append(step)
        return x, _per_layer(extras, self.output_hidden_states, self.output_attentions)


class Encoder(nn.Module):
    """A stack of layers: unrolled (`layer_0`, `layer_1`, ...) or one `nn.scan` over `layers`.

    Scanned, the parameters are stacked on a leading `layers` axis; faster compiles.

    Shared layers (ALBERT): `group_0` .. `group_{G-1}` (`LayerGroup`), each applied L/G
    times in a row with one set of parameters, whatever `scan_layers`; scanned, the L/G
    applications are one `nn.scan` that broadcasts the group's parameters to every step
    (not L/G copies)."""

    config: BertConfig
    output_hidden_states: bool = False
    output_attentions: bool = False
    pooled_only: bool = False

    @nn.compact
    def __call__(self, x, mask, deterministic: bool):
        """Returns (x, hidden states, attentions) over every layer, in order."""
        c = self.config
        if c.shares_layers:
            return self._shared_groups(x, mask, deterministic)
        if c.scan_layers:
            return self._scanned(x, mask, deterministic)
        return self._unrolled(x, mask, deterministic)

    def _scanned(self, x, mask, deterministic: bool):
        c = self.config
        scanned = nn.scan(
            _remat(Layer, c, (3,)), variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            in_axes=(nn.broadcast, nn.broadcast, 0), length=c.num_hidden_layers,
            metadata_params={nn.PARTITION_NAME: "layers"})
        x, (hidden, probs) = scanned(c, self.output_hidden_states, self.output_attentions,
                                     name="layers")(x, mask, deterministic,
                                                    jnp.arange(c.num_hidden_layers))
        return (x, None if hidden is None else tuple(hidden),
                None if probs is None else tuple(probs))

    def _unrolled(self, x, mask, deterministic: bool):
        c = self.config
        make = functools.partial(_remat(Layer, c, (3, 4)), c, self.output_hidden_states,
                                 self.output_attentions)
        extras = []
        last = c.num_hidden_layers - 1
        for i in range(c.num_hidden_layers):
            cls_only = self.pooled_only and i == last and not (
                self.output_hidden_states or self.output_attentions)
            x, step = make(name=f"layer_{i}", cls_only=cls_only)(x, mask, deterministic, i)
            extras.append(step)
        return (x, *_per_layer(extras, self.output_hidden_states, self.output_attentions))

    def _shared_groups(self, x, mask, deterministic: bool):
        """ALBERT's layers: (x, hidden states, attentions) over every application, in order."""
        c = self.config
        group_cls = _remat(LayerGroup, c, (3,))
        repeats = c.num_hidden_layers // c.num_hidden_groups
        hidden, probs = [], []
        for g in range(c.num_hidden_groups):
            if c.scan_layers:
                scanned = nn.scan(group_cls, variable_broadcast="params",
                                  split_rngs={"params": False, "dropout": True},
                                  in_axes=(nn.broadcast, nn.broadcast), length=repeats)
                x, (h, p) = scanned(c, self.output_hidden_states, self.output_attentions,
                                    name=f"group_{g}")(x, mask, deterministic)
                # Per inner layer [repeats, ...] -> application order (step, then layer).
                h = None if h is None else [s[i] for i in range(repeats) for s in h]
                p = None if p is None else [s[i] for i in range(repeats) for s in p]
            else:
                group = group_cls(c, self.output_hidden_states, self.output_attentions,
                                  name=f"group_{g}")
                h, p = [], []
                for _ in range(repeats):
                    x, (step_h, step_p) = group(x, mask, deterministic)
                    h += step_h or []
                    p += step_p or []
            hidden += h or []
            probs += p or []
        return (x, tuple(hidden) if self.output_hidden_states else None,
                tuple(probs) if self.output_attentions else None)


@flax.struct.dataclass
class BertOutput:
    """The encoder's outputs.

    sequence_output [B, L, H]; pooled_output [B, H] (None without a pooler); hidden_states: L+1
    arrays [B, L, H] (embeddings first); attentions: L arrays [B, N, L, L]."""

    sequence_output: Array
    pooled_output: Array | None = None
    hidden_states: tuple[Array, ...] | None = None
    attentions: tuple[Array, ...] | None = None


class BertModel(nn.Module):
    """The BERT encoder with the pooler (tanh, or `config.pooler_act`) on `[CLS]`.

    Call with int arrays [B, L]: `input_ids`, `input_mask` (1 = real token),
    `segment_ids`; optional `position_ids` (default 0..L-1) and `example_ids`
    (packed rows: tokens attend only within their example, see
    `attention.attention_mask`). With `attention_impl="fused"` and no `example_ids`, rows
    must be right-padded (real tokens first): the mask is passed as lengths.
    Training (`deterministic=False`) checks `config.check_trainable()`.

    `pooled_only`: the caller reads `pooled_output` alone, so the last (unscanned)
    layer computes [CLS] only: its keys and values still see every token, but its
    queries, output projection and feed-forward run on one position instead of L
    (exactly the same pooled output, a 1/num_layers cut of the encoder's FLOPs, less
    the keys and values); `sequence_output` is then [B, 1, H]. Ignored when hidden
    states or attentions are asked for, and for ALBERT (its last layer shares its
    parameters with the others).
    """

    config: BertConfig
    add_pooling_layer: bool = True
    output_hidden_states: bool = False
    output_attentions: bool = False
    pooled_only: bool = False

    def setup(self):
        c = self.config
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c, self.output_hidden_states, self.output_attentions,
                               self.pooled_only)
        if c.final_norm:
            self.final_norm = layer_norm(c, "final_norm")
        if self.add_pooling_layer:
            self.pooler = nn.Dense(c.hidden_size, dtype=c.dtype, param_dtype=c.param_dtype,
                                   kernel_init=dense_init(c, ("embed", "mlp")),
                                   bias_init=zeros_init(("mlp",)))

    def __call__(self, input_ids, input_mask=None, segment_ids=None, position_ids=None,
                 example_ids=None, *, max_examples: int | None = None,
                 deterministic: bool = True) -> BertOutput:
        """max_examples: at most this many examples in a packed row (default L).

        Packed rows take cuDNN's attention on GPU with one slot per example."""
        if input_mask is None:
            input_mask = jnp.ones_like(input_ids)
        if segment_ids is None:
            segment_ids = jnp.zeros_like(input_ids)
        c = self.config
        if not deterministic:
            c.check_trainable()
        x = self.embeddings(input_ids, segment_ids, position_ids, deterministic)
        mask = make_mask(c, input_mask, example_ids, position_ids,
                         fused=fused_path(c, self.output_attentions),
                         pooled_only=self.pooled_only, max_examples=max_examples)
        sequence, hidden, probs = self.encoder(x, mask, deterministic)
        if c.final_norm:
            sequence = self.final_norm(sequence)
        if hidden is not None:
            # The last after the final norm: the sequence output, as transformers gives it.
            hidden = (x, *hidden[:-1], sequence)
        pooled = None
        if self.add_pooling_layer:
            pooled = self.pool(sequence[:, 0])
        return BertOutput(sequence, pooled, hidden, probs)

    def attend(self, x: Array) -> Array:
        return self.embeddings.attend(x)

    def pool(self, cls_states: Array) -> Array:
        """The pooler on arbitrary [..., H] states (e.g. each packed example's [CLS])."""
        return activation(self.config.pooler_act)(self.pooler(cls_states))


def gather_positions(x: Array, positions: Array) -> Array:
    """x[b, positions[b, p]] for every b, p: [B, L, H] x [B, P] -> [B, P, H].

    A one-hot batched matmul, as `embeddings.one_hot_lookup`: the gradient of the gather is a
    scatter into [B, L, H] that GPUs serialise; this one's is a matmul.
    """
    one_hot = jax.nn.one_hot(positions, x.shape[1], dtype=x.dtype)
    return jnp.einsum("bpl,bl...->bp...", one_hot, x, precision=jax.lax.Precision.HIGHEST)


def mean_pool(states: Array, input_mask: Array | None, example_ids: Array | None = None,
              num_examples: int | None = None) -> Array:
    """The masked mean of states [B, L, H] over each example's tokens.

    [B, H], or [B, K, H] for packed rows (`example_ids` 1..K, `num_examples` K)."""
    if example_ids is None:
        weights = (jnp.ones(states.shape[:2]) if input_mask is None else input_mask)[:, None]
    else:
        weights = example_ids[:, None, :] == jnp.arange(1, num_examples + 1)[None, :, None]
    weights = weights.astype(states.dtype)  # [B, K or 1, L]
    # Summed in float32: hundreds of bfloat16 terms would lose the mean's low bits.
    sums = jnp.einsum("bkl,blh->bkh", weights, states, preferred_element_type=jnp.float32)
    means = (sums / jnp.maximum(weights.sum(-1, keepdims=True, dtype=jnp.float32), 1.0)
             ).astype(states.dtype)
    return means[:, 0] if example_ids is None else means


def count_params(params: Any) -> int:
    return sum(x.size for x in jax.tree.leaves(params))
