"""The BERT encoder as pure Flax linen modules.

Every parameter carries logical axis names (`vocab`, `embed`, `heads`, `kv`,
`mlp`, `layers`, ...) and activations are constrained with `activation_*`
names; `bert_jax.train.sharding` maps both onto a device mesh. Nothing here names a
mesh axis, reads a file or knows about an optimizer.

Shapes: B batch, L sequence length, H hidden size, N heads, D head size.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from flax.linen.dtypes import promote_dtype

from bert_jax.models import splash
from bert_jax.models.activations import activation
from bert_jax.models.config import BertConfig
from bert_jax.models.dropout import Dropout
from bert_jax.models.fp8 import fp8_dot_general

Array = jax.Array


def dense_init(config: BertConfig, axes: tuple[str, ...]):
    """BERT's initializer: normal with stddev `initializer_range`, truncated at 2 sigma."""
    return nn.with_logical_partitioning(
        nn.initializers.truncated_normal(config.initializer_range), axes)


def zeros_init(axes):
    return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)


def layer_norm(config: BertConfig, name: str, axis: str = "embed") -> nn.LayerNorm:
    """`axis`: the logical name of the normalised dimension ("factor_embed" for ALBERT's
    embedding width)."""
    # Statistics are computed in float32 whatever the compute dtype.
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps, dtype=config.dtype, param_dtype=config.param_dtype,
        use_bias=config.norm_bias,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), (axis,)),
        bias_init=zeros_init((axis,)), name=name)


def embedding_axis(config: BertConfig) -> str:
    """The logical name of the token embeddings' width: ALBERT's E is "factor_embed" (its
    [E, H] projection shards H as "embed"; a mesh axis can shard one dimension only)."""
    return "factor_embed" if config.model_type == "albert" else "embed"


def attention_mask(input_mask: Array, example_ids: Array | None = None) -> Array:
    """Boolean mask [B, 1, Lq, Lk] of the key positions each query may attend to.

    input_mask: [B, L], 1 for real tokens. example_ids: optional [B, L], the
    index of the packed example each token belongs to (0 = padding); tokens
    then only attend within their own example.
    """
    keys = input_mask.astype(bool)[:, None, None, :]
    if example_ids is None:
        return keys
    same = example_ids[:, :, None] == example_ids[:, None, :]
    return keys & same[:, None, :, :]


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
    """Word + learned absolute position + token type embeddings, LayerNorm, dropout;
    for ALBERT of width `embedding_size`, then projected to hidden_size. Rotary models
    have no position table (their positions act in attention), `type_vocab_size=0` no
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
        self.layer_norm = layer_norm(c, "layer_norm", width)
        self.dropout = Dropout(c.hidden_dropout_prob)
        if c.model_type == "albert":
            self.projection = nn.Dense(c.hidden_size, dtype=c.dtype, param_dtype=c.param_dtype,
                                       kernel_init=dense_init(c, (width, "embed")),
                                       bias_init=zeros_init(("embed",)))

    def __call__(self, input_ids, segment_ids, position_ids, deterministic: bool):
        """position_ids None: 0..L-1 in every row, a slice of the table broadcast over the
        batch (its gradient is a sum over the batch)."""
        c = self.config
        x = self.word_embeddings(input_ids)
        if not c.rotary:
            x = x + self._positions(input_ids, position_ids)
        if c.type_vocab_size:
            x = x + one_hot_lookup(self.token_type_embeddings.embedding, segment_ids, c.dtype)
        x = self.dropout(self.layer_norm(x), deterministic=deterministic)
        if c.model_type == "albert":
            x = self.projection(x)
        return nn.with_logical_constraint(
            x, ("activation_batch", "activation_length", "activation_embed"))

    def _positions(self, input_ids, position_ids):
        positions = self.position_embeddings.embedding
        if position_ids is None:
            # lax.slice_in_dim, not [:L]: L may be symbolic (bert-jax export).
            length = input_ids.shape[-1]
            return jax.lax.slice_in_dim(positions, 0, length).astype(self.config.dtype)[None]
        return one_hot_lookup(positions, position_ids, self.config.dtype)

    def attend(self, x: Array) -> Array:
        """Logits against the word embedding table (the tied MLM decoder): [..., E] -> [..., V]
        (E = hidden_size but for ALBERT)."""
        return self.word_embeddings.attend(x)


@flax.struct.dataclass
class PackedSegments:
    """Packed rows in the form of cuDNN's packed ("ragged") attention: per row, the
    length and start of each of up to M examples ([B, M] and [B, M + 1], -1 past the
    row's last example), and which tokens are real ([B, L])."""

    lengths: Array
    starts: Array
    tokens: Array


@flax.struct.dataclass
class AttentionMask:
    """Which keys each query may attend to, in one of four forms: `dense`, a boolean
    [B, 1, Lq or 1, Lk] (`attention_mask`); `lengths`, int32 [B] real tokens per
    right-padded row (the form cuDNN's fused attention takes; it rejects a dense
    [B, 1, 1, L] mask); `packed`, the examples of packed rows (`PackedSegments`, for
    cuDNN); `example_ids` [B, L] of packed rows (for splash attention on TPU).
    `positions` [B, L]: each token's position, for rotary models (None otherwise)."""

    dense: Array | None = None
    lengths: Array | None = None
    packed: PackedSegments | None = None
    example_ids: Array | None = None
    positions: Array | None = None


def packed_segments(example_ids: Array, max_examples: int) -> PackedSegments:
    """example_ids [B, L] (1..k on each row's consecutive examples, 0 on the padding at
    the end) as PackedSegments of M = max_examples + 1 slots: the examples, then the
    padding as a segment of its own, so that cuDNN defines every row of its output and
    gradients (rows it leaves outside every segment come back undefined, NaN in its
    backward pass)."""
    slot = jnp.where(example_ids > 0, example_ids, max_examples + 1)
    member = slot[:, :, None] == jnp.arange(1, max_examples + 2)  # [B, L, M]
    lengths = member.sum(1, dtype=jnp.int32)
    present = lengths > 0
    starts = jnp.where(present, jnp.argmax(member, axis=1).astype(jnp.int32), -1)
    # Present slots first (cuDNN reads them in order): a row with k < max_examples
    # examples has its padding in slot M, after k absent ones.
    order = jnp.argsort(~present, axis=1, stable=True)
    lengths, starts = (jnp.take_along_axis(jnp.where(present, x, -1), order, axis=1)
                       for x in (lengths, starts))
    starts = jnp.pad(starts, ((0, 0), (0, 1)), constant_values=-1)
    return PackedSegments(lengths, starts, example_ids > 0)


def cudnn_available(dtype) -> bool:
    """Whether attention in `dtype` can take cuDNN's fused kernels in this trace."""
    return splash.platform() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)


def cudnn_packed_available(dtype) -> bool:
    """Whether packed rows can take cuDNN's packed attention in this trace: jax's cuDNN
    module has it for Hopper and later GPUs only (asked as jax asks it), so an A100
    takes the dense mask."""
    if not cudnn_available(dtype):
        return False
    from jax._src.cudnn import fused_attention_stablehlo as cudnn
    return cudnn.check_compute_capability("9.0")


def fused_attention(q: Array, k: Array, v: Array, mask: AttentionMask,
                    window: int | None = None) -> Array:
    """softmax(q k^T / sqrt(D)) v with no dropout: [B, L, N, D] x3 -> [B, L, N, D].
    cuDNN flash attention on GPU in bf16/fp16 for right-padded rows (given as lengths,
    through `jax.nn.dot_product_attention`) and for packed rows (`mask.packed`); Pallas
    splash attention for packed rows on TPU (`mask.example_ids`); XLA's implementation
    elsewhere. Padded query rows attend to the real keys, as in the einsum path; in
    packed rows through cuDNN they are zeros.

    `window`: keys at most this far from the query (a sliding-window layer). Splash
    attention takes it as a local mask (its blocks outside the band are skipped); cuDNN
    in jax takes only causal windows, so a bidirectional one runs XLA's implementation."""
    if mask.packed is not None:  # never with a window (see BertModel._mask)
        return packed_cudnn_attention(q, k, v, mask.packed)
    if mask.example_ids is not None:
        return splash.splash_attention(q, k, v, mask.example_ids, window)
    cudnn = mask.lengths is not None and cudnn_available(q.dtype) and window is None
    return jax.nn.dot_product_attention(
        q, k, v, mask=mask.dense, key_value_seq_lengths=mask.lengths,
        local_window_size=None if window is None else (window, window),
        implementation="cudnn" if cudnn else "xla")


def packed_cudnn_attention(q: Array, k: Array, v: Array, packed: PackedSegments) -> Array:
    """cuDNN's packed attention: each example attends within itself, no [L, L] mask.
    jax exposes the segment offsets only in its cuDNN module, not in
    `jax.nn.dot_product_attention` (which takes one length per row)."""
    from jax._src.cudnn import fused_attention_stablehlo as cudnn
    out = cudnn.dot_product_attention(
        q, k, v, q_seqlen=packed.lengths, kv_seqlen=packed.lengths, q_offsets=packed.starts,
        kv_offsets=packed.starts, scale=1.0 / float(q.shape[-1]) ** 0.5,
        mask_type=cudnn.MaskType.PADDING, qkv_layout="BTNH")
    # Padding attends to padding: zeros instead, as in the dense-mask path's outputs.
    return jnp.where(packed.tokens[:, :, None, None], out, 0).astype(q.dtype)


def matmul(config: BertConfig):
    """The encoder layers' dot_general: float8 with current scaling when `config.fp8`
    (bert_jax/models/fp8.py), else XLA's in the compute dtype."""
    return fp8_dot_general if config.fp8 else jax.lax.dot_general


class Projection(nn.Module):
    """`x @ kernel + bias` as an einsum over a kernel of named axes, e.g. [H, N, D] for the
    query heads: the parameters of flax's `nn.Einsum` ("kernel", "bias"), with the
    encoder's matmul (`matmul`). Not nn.DenseGeneral: that initialises a flat 2-D kernel
    and would apply the 3-axis logical constraint to it when traced under a mesh."""

    config: BertConfig
    einsum_str: str
    shape: tuple[int, ...]
    kernel_axes: tuple[str, ...]
    bias_axes: tuple[str, ...]

    @nn.compact
    def __call__(self, x):
        c = self.config
        kernel = self.param("kernel", dense_init(c, self.kernel_axes), self.shape,
                            c.param_dtype)
        x, kernel = promote_dtype(x, kernel, dtype=c.dtype)
        out = jnp.einsum(self.einsum_str, x, kernel, _dot_general=matmul(c))
        if not c.use_bias:
            return out
        bias_shape = self.shape[-len(self.bias_axes):]
        bias = self.param("bias", zeros_init(self.bias_axes), bias_shape, c.param_dtype)
        return out + bias.astype(c.dtype)


def layer_kind(config: BertConfig, layer_index) -> tuple[Any, Any]:
    """(is_first, is_local) of layer `layer_index`: Python bools for an unrolled layer's
    static index, traced booleans for the index a scan passes in."""
    if isinstance(layer_index, int):
        return layer_index == 0, config.is_local_layer(layer_index)
    local = (layer_index % config.global_attn_every_n_layers != 0) & (config.local_attention > 0)
    return layer_index == 0, local


def pick(flag, when_true, when_false):
    """`when_true if flag else when_false` for a static flag, jnp.where for a traced one."""
    if isinstance(flag, bool):
        return when_true if flag else when_false
    return jnp.where(flag, when_true, when_false)


def rotate(x: Array, positions: Array, theta) -> Array:
    """Rotary position embedding of x [B, L, N, D] at positions [B, L] with base `theta`,
    in float32, pairing dimension i with i + D/2 (transformers' `rotate_half`)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, L, D/2]
    angles = jnp.concatenate([angles, angles], -1)[:, :, None, :]
    x32 = x.astype(jnp.float32)
    halves = jnp.concatenate([-x32[..., d // 2:], x32[..., :d // 2]], -1)
    return (x32 * jnp.cos(angles) + halves * jnp.sin(angles)).astype(x.dtype)


def window_mask(queries: int, keys: int, window: int, is_local) -> Array:
    """[Lq, Lk]: the keys within `window` positions of each query, every key where the
    (traced) `is_local` is false."""
    band = jnp.abs(jnp.arange(queries)[:, None] - jnp.arange(keys)[None, :]) <= window
    return band if isinstance(is_local, bool) else band | ~is_local


class SelfAttention(nn.Module):
    """Multi-head self-attention. "einsum" (`fused=False`): BERT's own, softmax in
    float32, large-negative masking, dropout on the probabilities, which it returns.
    `fused=True`: `fused_attention`, no dropout, returns None for the probabilities.
    Rotary models rotate the queries and keys by `mask.positions`; a local layer
    (`layer_kind`) sees the keys within local_attention / 2 of each query."""

    config: BertConfig
    fused: bool = False

    @nn.compact
    def __call__(self, x, mask: AttentionMask, deterministic: bool, queries=None,
                 layer_index=0):
        """queries: the states the queries come from (default x; [B, 1, H] for a last
        layer that only [CLS] is read from), keys and values always from x."""
        c = self.config
        queries = x if queries is None else queries
        qkv = functools.partial(
            Projection, c, "blh,hnd->blnd", (c.hidden_size, c.num_attention_heads, c.head_dim),
            ("embed", "heads", "kv"), ("heads", "kv"))
        heads = ("activation_batch", "activation_length", "activation_heads", "activation_kv")
        q = nn.with_logical_constraint(qkv(name="query")(queries), heads)
        k = nn.with_logical_constraint(qkv(name="key")(x), heads)
        v = nn.with_logical_constraint(qkv(name="value")(x), heads)
        _, is_local = layer_kind(c, layer_index)
        if c.rotary:
            theta = pick(is_local, c.local_rope_theta, c.rope_theta)
            q = rotate(q, mask.positions[:, :q.shape[1]], theta)
            k = rotate(k, mask.positions, theta)

        if self.fused:
            context, probs = self._fused(q, k, v, mask, is_local), None
        else:
            scores = jnp.einsum("bqnd,bknd->bnqk", q, k).astype(jnp.float32)
            scores = scores / jnp.sqrt(jnp.float32(c.head_dim))
            allowed = mask.dense
            if is_local is not False:
                allowed = allowed & window_mask(q.shape[1], k.shape[1],
                                                c.local_attention // 2, is_local)
            scores = jnp.where(allowed, scores, jnp.finfo(jnp.float32).min)
            probs = jax.nn.softmax(scores, axis=-1)
            dropped = Dropout(c.attention_probs_dropout_prob)(
                probs, deterministic=deterministic)
            context = jnp.einsum("bnqk,bknd->bqnd", dropped.astype(c.dtype), v)
        context = nn.with_logical_constraint(context, heads)
        out = Projection(c, "blnd,ndh->blh", (c.num_attention_heads, c.head_dim, c.hidden_size),
                         ("heads", "kv", "embed"), ("embed",), name="output")(context)
        return out, probs

    def _fused(self, q, k, v, mask, is_local):
        window = self.config.local_attention // 2
        if isinstance(is_local, bool):
            return fused_attention(q, k, v, mask, window if is_local else None)
        return jax.lax.cond(is_local, lambda: fused_attention(q, k, v, mask, window),
                            lambda: fused_attention(q, k, v, mask))


class Layer(nn.Module):
    """One transformer layer: post-LayerNorm as in BERT, or `pre_norm` as in ModernBERT
    (whose first layer has no norm before attention: the parameter exists in every layer,
    so that scanned layers share one structure, and layer 0 skips it). `layer_index`:
    the layer's place in the stack (static unrolled, traced under `nn.scan`), which
    decides the sliding window and the rotary base.

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
        act_axes = ("activation_batch", "activation_length", "activation_embed")

        # Attention probabilities asked for: the einsum path, whatever attention_impl.
        fused = c.attention_impl == "fused" and not self.output_attentions
        if self.cls_only and mask.dense is not None:  # per-query rows (packed): [CLS]'s row
            mask = mask.replace(dense=mask.dense[:, :, :1])
        attention = SelfAttention(c, fused, name="attention")
        attention_norm = layer_norm(c, "attention_layer_norm")
        mlp_norm = layer_norm(c, "output_layer_norm")
        if c.pre_norm:
            normed = pick(layer_kind(c, layer_index)[0], x, attention_norm(x))
            attn, probs = attention(normed, mask, deterministic,
                                    normed[:, :1] if self.cls_only else normed, layer_index)
            x = (x[:, :1] if self.cls_only else x) + dropout(attn)
            x = nn.with_logical_constraint(x, act_axes)
            x = x + dropout(self._mlp(mlp_norm(x)))
        else:
            queries = x[:, :1] if self.cls_only else x
            attn, probs = attention(x, mask, deterministic, queries, layer_index)
            x = nn.with_logical_constraint(attention_norm(queries + dropout(attn)), act_axes)
            x = mlp_norm(x + dropout(self._mlp(x)))
        x = nn.with_logical_constraint(x, act_axes)

        extras = (x if self.output_hidden_states else None,
                  probs if self.output_attentions else None)
        return x, extras

    def _mlp(self, x):
        """BERT's feed-forward act(x W_in) W_out, or with `gated_mlp` GeGLU's
        (act(x W_in) * x W_gate) W_out."""
        c = self.config
        dense = functools.partial(nn.Dense, dtype=c.dtype, param_dtype=c.param_dtype,
                                  dot_general=matmul(c), use_bias=c.use_bias)
        up = functools.partial(dense, c.intermediate_size,
                               kernel_init=dense_init(c, ("embed", "mlp")),
                               bias_init=zeros_init(("mlp",)))
        mlp_axes = ("activation_batch", "activation_length", "activation_mlp")
        h = nn.with_logical_constraint(activation(c.hidden_act)(up(name="intermediate")(x)),
                                       mlp_axes)
        if c.gated_mlp:
            h = nn.with_logical_constraint(h * up(name="gate")(x), mlp_axes)
        return dense(c.hidden_size, kernel_init=dense_init(c, ("mlp", "embed")),
                     bias_init=zeros_init(("embed",)), name="output")(h)


_REMAT_POLICIES = {
    "full": None,  # save nothing, recompute the whole layer in the backward pass
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_with_no_batch_dims": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class LayerGroup(nn.Module):
    """ALBERT's group of `inner_group_num` layers (`layer_0`, ...), applied in turn; the
    encoder applies a group several times with the same parameters. Returns the new
    hidden states and, like `Layer`, the per-layer outputs asked for (tuples over the
    group's layers)."""

    config: BertConfig
    output_hidden_states: bool = False
    output_attentions: bool = False

    @nn.compact
    def __call__(self, x, mask, deterministic: bool):
        per_layer = []
        for k in range(self.config.inner_group_num):
            x, extras = Layer(self.config, self.output_hidden_states, self.output_attentions,
                              name=f"layer_{k}")(x, mask, deterministic)
            per_layer.append(extras)
        hidden = tuple(h for h, _ in per_layer) if self.output_hidden_states else None
        probs = tuple(p for _, p in per_layer) if self.output_attentions else None
        return x, (hidden, probs)


class Encoder(nn.Module):
    """A stack of layers: unrolled (`layer_0`, `layer_1`, ...) or one `nn.scan` over
    `layers` (parameters stacked on a leading `layers` axis; faster compiles).

    ALBERT: `group_0` .. `group_{G-1}` (`LayerGroup`), each applied L/G times in a row with
    one set of parameters, whatever `scan_layers`; scanned, the L/G applications are one
    `nn.scan` that broadcasts the group's parameters to every step (not L/G copies)."""

    config: BertConfig
    output_hidden_states: bool = False
    output_attentions: bool = False
    pooled_only: bool = False

    @nn.compact
    def __call__(self, x, mask, deterministic: bool):
        c = self.config
        if c.model_type == "albert":
            return self._shared_groups(x, mask, deterministic)
        layer_cls = Layer
        if c.remat_policy != "none":
            # Static: `deterministic`, and an unrolled layer's index (see `layer_kind`).
            layer_cls = nn.remat(Layer, policy=_REMAT_POLICIES[c.remat_policy],
                                 static_argnums=(3,) if c.scan_layers else (3, 4),
                                 prevent_cse=not c.scan_layers)
        make = functools.partial(layer_cls, c, self.output_hidden_states, self.output_attentions)

        if c.scan_layers:
            scanned = nn.scan(
                layer_cls, variable_axes={"params": 0}, split_rngs={"params": True,
                                                                    "dropout": True},
                in_axes=(nn.broadcast, nn.broadcast, 0), length=c.num_hidden_layers,
                metadata_params={nn.PARTITION_NAME: "layers"})
            x, (hidden, probs) = scanned(c, self.output_hidden_states, self.output_attentions,
                                         name="layers")(x, mask, deterministic,
                                                        jnp.arange(c.num_hidden_layers))
            hidden = None if hidden is None else tuple(hidden)
            probs = None if probs is None else tuple(probs)
        else:
            per_layer = []
            last = c.num_hidden_layers - 1
            for i in range(c.num_hidden_layers):
                cls_only = self.pooled_only and i == last and not (
                    self.output_hidden_states or self.output_attentions)
                x, extras = make(name=f"layer_{i}", cls_only=cls_only)(x, mask, deterministic, i)
                per_layer.append(extras)
            hidden = tuple(h for h, _ in per_layer) if self.output_hidden_states else None
            probs = tuple(p for _, p in per_layer) if self.output_attentions else None
        return x, hidden, probs

    def _shared_groups(self, x, mask, deterministic: bool):
        """ALBERT's layers: (x, hidden states, attentions) over every application, in order."""
        c = self.config
        group_cls = LayerGroup
        if c.remat_policy != "none":
            group_cls = nn.remat(LayerGroup, policy=_REMAT_POLICIES[c.remat_policy],
                                 static_argnums=(3,), prevent_cse=not c.scan_layers)
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
    """sequence_output [B, L, H]; pooled_output [B, H] (None without a pooler);
    hidden_states: L+1 arrays [B, L, H] (embeddings first); attentions: L arrays [B, N, L, L]."""

    sequence_output: Array
    pooled_output: Array | None = None
    hidden_states: tuple[Array, ...] | None = None
    attentions: tuple[Array, ...] | None = None


class BertModel(nn.Module):
    """The BERT encoder with the tanh pooler on `[CLS]`.

    Call with int arrays [B, L]: `input_ids`, `input_mask` (1 = real token),
    `segment_ids`; optional `position_ids` (default 0..L-1) and `example_ids`
    (packed rows: tokens attend only within their example, see
    `attention_mask`). With `attention_impl="fused"` and no `example_ids`, rows
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
        """max_examples: at most this many examples in a packed row (default L); packed
        rows take cuDNN's attention on GPU with one slot per example."""
        if input_mask is None:
            input_mask = jnp.ones_like(input_ids)
        if segment_ids is None:
            segment_ids = jnp.zeros_like(input_ids)
        c = self.config
        if not deterministic:
            c.check_trainable()
        x = self.embeddings(input_ids, segment_ids, position_ids, deterministic)
        mask = self._mask(input_ids, input_mask, example_ids, max_examples)
        if c.rotary:
            positions = jnp.arange(input_ids.shape[-1])[None] if position_ids is None \
                else position_ids
            mask = mask.replace(positions=jnp.broadcast_to(positions, input_ids.shape))
        sequence, hidden, probs = self.encoder(x, mask, deterministic)
        if c.final_norm:
            sequence = self.final_norm(sequence)
        if hidden is not None:
            # The last after the final norm: the sequence output, as transformers gives it.
            hidden = (x, *hidden[:-1], sequence)
        pooled = None
        if self.add_pooling_layer:
            pooled = jnp.tanh(self.pooler(sequence[:, 0]))
        return BertOutput(sequence, pooled, hidden, probs)

    def _mask(self, input_ids, input_mask, example_ids, max_examples) -> AttentionMask:
        """The mask in the form the attention path of this trace takes (`AttentionMask`)."""
        c = self.config
        fused = c.attention_impl == "fused" and not self.output_attentions
        if fused and example_ids is None:
            # At least 1: an all-padding row (batch filler) stays finite in cuDNN.
            lengths = jnp.maximum(jnp.sum(input_mask, axis=-1, dtype=jnp.int32), 1)
            return AttentionMask(lengths=lengths)
        # cuDNN's packed attention has no bidirectional window: windowed models' packed
        # rows take the dense mask on GPU, as all packed rows do before Hopper.
        if (fused and cudnn_packed_available(c.dtype) and not self.pooled_only
                and not c.local_attention):
            return AttentionMask(packed=packed_segments(
                example_ids, max_examples or input_ids.shape[-1]))
        if fused and splash.available(input_ids.shape[-1]) and not self.pooled_only:
            return AttentionMask(example_ids=example_ids)
        return AttentionMask(dense=attention_mask(input_mask, example_ids))

    def attend(self, x: Array) -> Array:
        return self.embeddings.attend(x)

    def pool(self, cls_states: Array) -> Array:
        """The pooler on arbitrary [..., H] states (e.g. each packed example's [CLS])."""
        return jnp.tanh(self.pooler(cls_states))


def gather_positions(x: Array, positions: Array) -> Array:
    """x[b, positions[b, p]] for every b, p: [B, L, H] x [B, P] -> [B, P, H].

    A one-hot batched matmul, as `one_hot_lookup`: the gradient of the gather is a
    scatter into [B, L, H] that GPUs serialise; this one's is a matmul.
    """
    one_hot = jax.nn.one_hot(positions, x.shape[1], dtype=x.dtype)
    return jnp.einsum("bpl,bl...->bp...", one_hot, x, precision=jax.lax.Precision.HIGHEST)


def mean_pool(states: Array, input_mask: Array | None, example_ids: Array | None = None,
              num_examples: int | None = None) -> Array:
    """The masked mean of states [B, L, H] over each example's tokens: [B, H], or
    [B, K, H] for packed rows (`example_ids` 1..K, `num_examples` K)."""
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
