"""The accelerator plugins' environment, set before JAX initialises its backends.

The `bert-jax` CLI, the demo and the test suite call `configure_backends` first. Imports no JAX.

- `--xla_tpu_spmd_rng_bit_generator_unsafe=true` in LIBTPU_INIT_ARGS: without it XLA does
  not partition RngBitGenerator, so the dropout bits of `rbg`/`unsafe_rbg` keys are
  drawn at the global batch's shape on every chip (memory and work that grow with the
  pod: 6 GiB per mask on a 256-chip slice). With it each chip draws its own shard's
  bits; the masks then depend on the mesh, as `unsafe_rbg` already allows.
- On a machine with no TPU attached (compiling for a topology, CPU and GPU runs),
  placeholders for the TPU_ACCELERATOR_TYPE / TPU_WORKER_HOSTNAMES that libtpu looks
  for, so that it does not print warnings on every start, and ALLOW_MULTIPLE_LIBTPU_LOAD
  so that several processes can compile at once (no chip to guard).
- On a machine with no NVIDIA driver (compiling for GPU hosts with the `gpu-compile`
  extra, CPU and TPU runs), JAX_SKIP_CUDA_CONSTRAINTS_CHECK: jax's CUDA plugin would
  otherwise print a traceback on every start, failing to read the driver's library
  versions. It still registers for compiling; there is no GPU to run on either way.
"""

from __future__ import annotations

import glob
import os
from typing import MutableMapping

RNG_FLAG = "--xla_tpu_spmd_rng_bit_generator_unsafe=true"
_GOOGLE_PCI_VENDOR = "0x1ae0"


def tpu_attached() -> bool:
    """Whether a TPU chip is on this machine's PCI bus, or a TPU device node exists.

    The bus is checked as jax's cloud_tpu_init checks it."""
    for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(vendor, encoding="ascii") as f:
                if f.read().strip() == _GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def nvidia_driver_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")


def configure_backends(environ: MutableMapping[str, str] = os.environ) -> None:
    """Sets the variables above (keeping any the user set). Call before importing JAX."""
    args = environ.get("LIBTPU_INIT_ARGS", "")
    if "xla_tpu_spmd_rng_bit_generator_unsafe" not in args:
        environ["LIBTPU_INIT_ARGS"] = f"{args} {RNG_FLAG}".strip()
    if not tpu_attached():
        # Any valid type silences libtpu; it does not change compiling for a topology,
        # whose chips and hosts are given explicitly (`bert_jax.aot.tpu_slices`).
        environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
        environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
        environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if not nvidia_driver_present():
        environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
