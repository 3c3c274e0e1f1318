"""Self-attention and the choice of how it is computed.

Two paths (`BertConfig.attention_impl`): "einsum", BERT's own (probabilities materialised
in float32, dropout on them), and "fused", which takes, per trace:
- cuDNN flash attention on GPU in bf16/fp16 for right-padded rows (one length per row,
  through `jax.nn.dot_product_attention`);
- cuDNN's packed attention for packed rows on Hopper and later (`PackedSegments`);
- Pallas splash attention for packed rows on TPU (bert_jax/models/splash.py);
- XLA's `jax.nn.dot_product_attention` with a dense mask elsewhere.
`make_mask` puts the mask in the form the path of the trace takes (`AttentionMask`);
`SelfAttention` projects the heads and attends through `attend`.

Shapes: B batch, L sequence length, H hidden size, N heads, D head size.
"""

from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from bert_jax.models import jax_compat, splash
from bert_jax.models.blocks import Projection, layer_kind, pick
from bert_jax.models.config import BertConfig
from bert_jax.models.dropout import Dropout
from bert_jax.models.splash import HEADS_AXES

Array = jax.Array


@flax.struct.dataclass
class PackedSegments:
    """Packed rows in the form of cuDNN's packed ("ragged") attention.

    Per row, the length and start of each of up to M examples ([B, M] and [B, M + 1], -1 past the
    row's last example), and which tokens are real ([B, L])."""

    lengths: Array
    starts: Array
    tokens: Array


@flax.struct.dataclass
class AttentionMask:
    """Which keys each query may attend to, in one of four forms.

    `dense`, a boolean [B, 1, Lq or 1, Lk] (`attention_mask`); `lengths`, int32 [B] real tokens per
    right-padded row (the form cuDNN's fused attention takes; it rejects a dense [B, 1, 1, L] mask);
    `packed`, the examples of packed rows (`PackedSegments`, for cuDNN); `example_ids` [B, L] of
    packed rows (for splash attention on TPU). `positions` [B, L]: each token's position, for rotary
    models (None otherwise)."""

    dense: Array | None = None
    lengths: Array | None = None
    packed: PackedSegments | None = None
    example_ids: Array | None = None
    positions: Array | None = None

    def for_first_query(self) -> AttentionMask:
        """The mask of a layer that computes position 0 ([CLS]) alone.

        A dense mask's per-query rows (packed rows) are cut to the first."""
        return self if self.dense is None else self.replace(dense=self.dense[:, :, :1])


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


def packed_segments(example_ids: Array, max_examples: int) -> PackedSegments:
    """example_ids [B, L] as PackedSegments of M = max_examples + 1 slots.

    example_ids are 1..k on each row's consecutive examples, 0 on the padding at the end. The slots
    hold the examples, then the padding as a segment of its own, so that cuDNN defines every row of
    its output and gradients (rows it leaves outside every segment come back undefined, NaN in its
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


def fused_path(config: BertConfig, output_attentions: bool) -> bool:
    """Whether attention takes `fused_attention`: attention_impl "fused", no probabilities asked.

    Only the einsum path has the attention probabilities."""
    return config.attention_impl == "fused" and not output_attentions


def make_mask(config: BertConfig, input_mask: Array, example_ids: Array | None,
              position_ids: Array | None, *, fused: bool, pooled_only: bool,
              max_examples: int | None) -> AttentionMask:
    """The mask in the form the attention path of this trace takes, with the positions.

    The positions are for rotary models, and are 0..L-1 in every row when `position_ids` is None.
    `max_examples`: at most this many examples in a packed row (default L)."""
    mask = _mask_form(config, input_mask, example_ids, fused=fused, pooled_only=pooled_only,
                      max_examples=max_examples)
    if config.rotary:
        positions = (jnp.arange(input_mask.shape[-1])[None] if position_ids is None
                     else position_ids)
        mask = mask.replace(positions=jnp.broadcast_to(positions, input_mask.shape))
    return mask


def _mask_form(config, input_mask, example_ids, *, fused, pooled_only, max_examples):
    if fused and example_ids is None:
        # At least 1: an all-padding row (batch filler) stays finite in cuDNN.
        lengths = jnp.maximum(jnp.sum(input_mask, axis=-1, dtype=jnp.int32), 1)
        return AttentionMask(lengths=lengths)
    # cuDNN's packed attention has no bidirectional window: windowed models' packed
    # rows take the dense mask on GPU, as all packed rows do before Hopper.
    length = input_mask.shape[-1]
    if (fused and cudnn_packed_available(config.dtype) and not pooled_only
            and not config.local_attention):
        return AttentionMask(packed=packed_segments(example_ids, max_examples or length))
    if fused and splash.available(length) and not pooled_only:
        return AttentionMask(example_ids=example_ids)
    return AttentionMask(dense=attention_mask(input_mask, example_ids))


def cudnn_available(dtype) -> bool:
    """Whether attention in `dtype` can take cuDNN's fused kernels in this trace."""
    return splash.platform() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)


def cudnn_packed_available(dtype) -> bool:
    """Whether packed rows can take cuDNN's packed attention in this trace.

    jax's cuDNN module has it for Hopper and later GPUs only (asked as jax asks it), so an A100
    takes the dense mask."""
    if not cudnn_available(dtype):
        return False
    return jax_compat.cudnn_attention().check_compute_capability("9.0")


def fused_attention(q: Array, k: Array, v: Array, mask: AttentionMask,
                    window: int | None = None) -> Array:
    """softmax(q k^T / sqrt(D)) v with no dropout: [B, L, N, D] x3 -> [B, L, N, D].

    cuDNN flash attention on GPU in bf16/fp16 for right-padded rows (given as lengths, through
    `jax.nn.dot_product_attention`) and for packed rows (`mask.packed`); Pallas splash attention for
    packed rows on TPU (`mask.example_ids`); XLA's implementation elsewhere. Padded query rows
    attend to the real keys, as in the einsum path; in packed rows through cuDNN they are zeros.

    `window`: keys at most this far from the query (a sliding-window layer). Splash
    attention takes it as a local mask (its blocks outside the band are skipped); cuDNN
    in jax takes only causal windows, so a bidirectional one runs XLA's implementation."""
    if mask.packed is not None:  # never with a window (see `make_mask`)
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

    jax exposes the segment offsets only in its cuDNN module, not in `jax.nn.dot_product_attention`
    (which takes one length per row)."""
    cudnn = jax_compat.cudnn_attention()
    out = cudnn.dot_product_attention(
        q, k, v, q_seqlen=packed.lengths, kv_seqlen=packed.lengths, q_offsets=packed.starts,
        kv_offsets=packed.starts, scale=1.0 / float(q.shape[-1]) ** 0.5,
        mask_type=cudnn.MaskType.PADDING, qkv_layout="BTNH")
    # Padding attends to padding: zeros instead, as in the dense-mask path's outputs.
    return jnp.where(packed.tokens[:, :, None, None], out, 0).astype(q.dtype)


def rotate(x: Array, positions: Array, theta) -> Array:
    """Rotary position embedding of x [B, L, N, D] at positions [B, L] with base `theta`.

    In float32; dimension i is paired with i + D/2 (transformers' `rotate_half`)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, L, D/2]
    angles = jnp.concatenate([angles, angles], -1)[:, :, None, :]
    x32 = x.astype(jnp.float32)
    halves = jnp.concatenate([-x32[..., d // 2:], x32[..., :d // 2]], -1)
    return (x32 * jnp.cos(angles) + halves * jnp.sin(angles)).astype(x.dtype)


def window_mask(queries: int, keys: int, window: int, is_local) -> Array:
    """[Lq, Lk]: the keys within `window` positions of each query.

    Every key where the (traced) `is_local` is false."""
    band = jnp.abs(jnp.arange(queries)[:, None] - jnp.arange(keys)[None, :]) <= window
    return band if isinstance(is_local, bool) else band | ~is_local


def attend(config: BertConfig, q: Array, k: Array, v: Array, mask: AttentionMask, *,
           fused: bool, is_local, deterministic: bool) -> tuple[Array, Array | None]:
    """(context [B, Lq, N, D], probabilities [B, N, Lq, Lk] or None when `fused`).

    `is_local`: whether the layer sees only the keys within local_attention / 2 of each query
    (static or traced, `layer_kind`). The einsum path's dropout is a submodule of the caller: call
    inside a module's compact `__call__`."""
    window = config.local_attention // 2
    if fused:
        if isinstance(is_local, bool):
            return fused_attention(q, k, v, mask, window if is_local else None), None
        return jax.lax.cond(is_local, lambda: fused_attention(q, k, v, mask, window),
                            lambda: fused_attention(q, k, v, mask)), None
    scores = jnp.einsum("bqnd,bknd->bnqk", q, k).astype(jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(config.head_dim))
    allowed = mask.dense
    if is_local is not False:
        allowed = allowed & window_mask(q.shape[1], k.shape[1], window, is_local)
    scores = jnp.where(allowed, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1)
    dropped = Dropout(config.attention_probs_dropout_prob)(probs, deterministic=deterministic)
    return jnp.einsum("bnqk,bknd->bqnd", dropped.astype(config.dtype), v), probs


class SelfAttention(nn.Module):
    """Multi-head self-attention.

    "einsum" (`fused=False`): BERT's own, softmax in float32, large-negative masking, dropout on the
    probabilities, which it returns. `fused=True`: `fused_attention`, no dropout, returns None for
    the probabilities. Rotary models rotate the queries and keys by `mask.positions`; a local layer
    (`layer_kind`) sees the keys within local_attention / 2 of each query. With fewer key/value
    heads K than query heads N (grouped-query attention), the keys and values are projected to K
    heads ("kv_heads", replicated: small) and each is repeated for its N / K query heads, which then
    shard as heads do."""

    config: BertConfig
    fused: bool = False

    @nn.compact
    def __call__(self, x, mask: AttentionMask, deterministic: bool, queries=None,
                 layer_index=0):
        """Attends from `queries` (default x) to the keys and values of x.

        queries: the states the queries come from (default x; [B, 1, H] for a last layer that only
        [CLS] is read from), keys and values always from x."""
        c = self.config
        queries = x if queries is None else queries
        def project(heads, axis, name, states):
            return Projection(c, "blh,hnd->blnd", (c.hidden_size, heads, c.head_dim),
                              ("embed", axis, "kv"), (axis, "kv"), name=name)(states)

        kv_heads, groups = c.kv_heads, c.num_attention_heads // c.kv_heads
        kv_axis = "heads" if groups == 1 else "kv_heads"
        q = nn.with_logical_constraint(project(c.num_attention_heads, "heads", "query", queries),
                                       HEADS_AXES)
        k, v = (project(kv_heads, kv_axis, name, x) for name in ("key", "value"))
        _, is_local = layer_kind(c, layer_index)
        if c.rotary:
            theta = pick(is_local, c.local_rope_theta, c.rope_theta)
            q = rotate(q, mask.positions[:, :q.shape[1]], theta)
            k = rotate(k, mask.positions, theta)
        # Query head i reads key/value head i // groups (transformers' `repeat_kv`).
        k, v = (nn.with_logical_constraint(jnp.repeat(t, groups, axis=2), HEADS_AXES)
                for t in (k, v))
        context, probs = attend(c, q, k, v, mask, fused=self.fused, is_local=is_local,
                                deterministic=deterministic)
        context = nn.with_logical_constraint(context, HEADS_AXES)
        out = Projection(c, "blnd,ndh->blh", (c.num_attention_heads, c.head_dim, c.hidden_size),
                         ("heads", "kv", "embed"), ("embed",), name="output")(context)
        return out, probs
