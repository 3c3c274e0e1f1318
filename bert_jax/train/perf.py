"""Model FLOPs and device peaks, for the MFU estimate.

MFU counts the FLOPs the model needs (matmuls, 3x forward for training), not
what the hardware did: remat recomputation and padding do not raise it.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

from bert_jax.models.config import BertConfig

# Dense bf16 peaks per device (chip), FLOP/s, by `device_kind` prefix.
_PEAK_FLOPS = {
    "TPU v2": 45e12, "TPU v3": 123e12, "TPU v4": 275e12, "TPU v5 lite": 197e12,
    "TPU v5e": 197e12, "TPU v5p": 459e12, "TPU v5": 459e12, "TPU v6 lite": 918e12,
    "TPU v6e": 918e12, "NVIDIA A100": 312e12, "NVIDIA H100": 989e12,
    "NVIDIA H200": 989e12, "NVIDIA L4": 121e12, "NVIDIA A10G": 125e12,
}


def forward_flops_per_example(config: BertConfig, seq_length: int,
                              num_predictions: int | None) -> float:
    """Matmul FLOPs of one forward pass of BertForPreTraining on one row.

    num_predictions: MLM outputs per row (None: every position). ALBERT: every applied
    layer counts (sharing saves parameters, not FLOPs), plus the E -> H projection, and
    the MLM head decodes at width E. Sliding-window layers count the keys in the window,
    GeGLU its gate.
    """
    h, i, n, e = (config.hidden_size, config.intermediate_size, seq_length,
                  config.embedding_width)
    mlp = (3 if config.gated_mlp else 2) * 2 * h * i  # GeGLU: the gate's matmul too
    dense = config.depth * n * (2 * 4 * h * h + mlp)
    # Attention scores and values over the keys each query sees (a local layer's window).
    keys = [min(n, config.local_attention + 1) if config.is_local_layer(k) else n
            for k in range(config.depth)]
    attention = sum(2 * 2 * n * k * h for k in keys)
    mlm = (num_predictions or n) * (2 * h * e + 2 * e * config.vocab_size)
    pooler_nsp = 2 * h * h + 2 * h * 2
    projection = n * 2 * e * h if config.factorized_embeddings else 0
    return dense + attention + mlm + pooler_nsp + projection


def train_flops_per_example(config: BertConfig, seq_length: int,
                            num_predictions: int | None) -> float:
    """Forward + backward (2x forward) FLOPs per row."""
    return 3 * forward_flops_per_example(config, seq_length, num_predictions)


@functools.lru_cache(maxsize=None)
def measured_matmul_flops(size: int = 1024, dtype: str = "float32", seconds: float = 0.5) -> float:
    """FLOP/s of a square matmul on the default device.

    The practical peak where no table entry exists (CPUs)."""
    x = jnp.ones((size, size), dtype)
    f = jax.jit(lambda a: a @ a)
    f(x).block_until_ready()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        f(x).block_until_ready()
        count += 1
    return 2 * size ** 3 * count / (time.perf_counter() - start)


def peak_flops_per_device(device: jax.Device | None = None, dtype: str = "float32") -> float:
    """A device's peak FLOP/s.

    The vendor figure for known accelerators, measured for this process's CPUs (and other local
    devices not in the table)."""
    device = device or jax.local_devices()[0]
    kind = getattr(device, "device_kind", "")
    for prefix, flops in sorted(_PEAK_FLOPS.items(), key=lambda kv: -len(kv[0])):
        if kind.startswith(prefix):
            return flops
    if device not in jax.local_devices():  # a compile target (bert-jax compile): not here
        raise ValueError(f"no peak FLOP/s on record for {kind or device.platform!r}")
    if device.platform == "cpu":
        # Fake CPU devices (--xla_force_host_platform_device_count) share the same cores.
        return measured_matmul_flops(dtype=dtype) / jax.local_device_count()
    return measured_matmul_flops(dtype=dtype)
