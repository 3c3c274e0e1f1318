"""Packed rows through Pallas splash attention on TPU.

Each token attends to the tokens of its own example (segment ids), with no [L, L] mask in HBM.

The kernel is a Pallas call, which XLA's partitioner cannot split, so it runs under
`jax.shard_map` over the mesh of the trace (`jax.set_mesh`): the batch and the heads
sharded as the logical axis rules shard the activations, the sequence whole on each
device. Imports jax alone; the kernel module is imported when a TPU trace first needs it.
"""

from __future__ import annotations

import flax.linen as nn
import jax
from jax.sharding import PartitionSpec

HEADS_AXES = ("activation_batch", "activation_length", "activation_heads", "activation_kv")


BLOCK = 128  # the kernel's default block size: the sequence must be a multiple of it


def mesh_platform() -> str | None:
    """The platform of the mesh the current trace runs under (`jax.set_mesh`).

    TPU when `bert-jax compile` targets a slice from a CPU machine. None without a mesh."""
    device = getattr(jax.sharding.get_abstract_mesh(), "abstract_device", None)
    return None if device is None else device.platform


def platform() -> str:
    """The platform the current trace compiles for: the mesh's, else the default backend."""
    return mesh_platform() or jax.default_backend()


def available(length: int) -> bool:
    """Whether packed rows of `length` tokens can take splash attention in this trace."""
    return mesh_platform() == "tpu" and length % BLOCK == 0


def splash_attention(q, k, v, example_ids, window: int | None = None):
    """softmax(q k^T / sqrt(D)) v within each example.

    q, k, v [B, L, N, D], example_ids [B, L] (0 on padding, which attends to padding). Returns
    [B, L, N, D]. `window`: keys at most this many positions from the query
    (a sliding-window layer): a LocalMask, whose blocks outside the band the kernel skips."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernels
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    spec = PartitionSpec(*nn.logical_to_mesh_axes(HEADS_AXES))
    spec = PartitionSpec(spec[0], None, spec[2], None)  # the whole sequence per device
    length, dim = q.shape[1], q.shape[3]

    def local(q, k, v, ids):
        shape = (length, length)
        one = (masks.FullMask(shape) if window is None
               else masks.LocalMask(shape, (window, window), offset=0))
        mask = masks.MultiHeadMask([one] * q.shape[2])
        kernel = kernels.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
        heads_first = lambda x: x.transpose(0, 2, 1, 3)  # [b, N, L, D], the kernel's layout
        attend = lambda q, k, v, ids: kernel(q, k, v, segment_ids=kernels.SegmentIds(ids, ids))
        out = jax.vmap(attend)(heads_first(q * dim ** -0.5), heads_first(k), heads_first(v),
                               ids)
        return heads_first(out)

    return jax.shard_map(local, in_specs=(spec, spec, spec, PartitionSpec(spec[0], None)),
                         out_specs=spec, check_vma=False)(q, k, v, example_ids)
