"""NVIDIA GPU hosts as users write them -> XLA's compile-only CUDA client, and each GPU's memory.

Names such as `h100-8` (one host of 8 H100s), `h200-16` (two hosts of 8) and `a100-1` (one GPU)
become the arguments of `jax.experimental.topologies.get_topology_desc` that make the compile-only
client (jax's CUDA plugin; no GPU needed). Imports no JAX.

XLA needs a description of the GPU it compiles for (its GpuTargetConfig): the compute
capability picks the kernels it may emit, the SM count, clock and memory bandwidth feed
its fusion and scheduling cost models, the memory size its scheduler's limit. These are
written here from the GPUs' published specifications and, for memory, what the driver
reports (nvidia-smi); the H200's memory was read on one. Hosts hold 8 GPUs (HGX boards);
1, 2 or 4 GPUs are one host.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re

from bert_jax.errors import UserError

MIB = 1024 ** 2
GPUS_PER_HOST = 8
# JAX's GPU client takes this share of memory at start (XLA_PYTHON_CLIENT_MEM_FRACTION).
DEFAULT_MEM_FRACTION = 0.75
INSTALL = "pip install -e .[gpu-compile] (no GPU needed)"
_NAME = re.compile(r"([a-z]\d{3})-(\d+)")  # a GPU's name (a100, h200) and a GPU count


@dataclasses.dataclass(frozen=True)
class Gpu:
    device_kind: str          # as the driver and jax name it
    compute_capability: tuple
    sms: int
    fp32_units_per_sm: int
    boost_clock_ghz: float
    memory_bandwidth: int     # bytes/s
    l2_bytes: int
    shared_memory_per_sm: int
    shared_memory_per_block_optin: int
    memory_mib: int           # total, as nvidia-smi reports it


GPUS = {
    "a100": Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 108, 64, 1.41, 2_039_000_000_000,
                40 * MIB, 164 * 1024, 163 * 1024, 81920),
    "h100": Gpu("NVIDIA H100 80GB HBM3", (9, 0), 132, 128, 1.98, 3_350_000_000_000,
                50 * MIB, 228 * 1024, 227 * 1024, 81559),
    "h200": Gpu("NVIDIA H200", (9, 0), 132, 128, 1.98, 4_800_000_000_000,
                50 * MIB, 228 * 1024, 227 * 1024, 143771),
}


@dataclasses.dataclass(frozen=True)
class GpuHosts:
    """`chips` GPUs of one kind, GPUS_PER_HOST to a host.

    The same interface as a TPU slice (`bert_jax.aot.tpu_slices.Topology`)."""

    platform = "gpu"
    name: str
    generation: str
    chips: int
    hbm_bytes: int            # what one process may use: JAX's share of the memory

    @property
    def gpu(self) -> Gpu:
        return GPUS[self.generation]

    @property
    def hosts(self) -> int:
        return max(1, self.chips // GPUS_PER_HOST)

    def describe_args(self, num_slices: int = 1) -> dict:
        per_host = min(self.chips, GPUS_PER_HOST)
        return dict(platform="cuda", target_config=target_config(self.gpu),
                    topology=f"{num_slices}x{self.hosts}x{per_host}")


def matches(name: str) -> bool:
    """Whether `name` is written as a GPU host name (a100-8, h100-16, ...)."""
    return _NAME.fullmatch(name.strip().lower()) is not None


def example_names() -> list[str]:
    return [f"{g}-{n}" for g in GPUS for n in (1, 8, 16)]


def resolve_hosts(name: str, environ=os.environ) -> GpuHosts:
    """`h100-8` -> its GpuHosts; UserError naming the known GPUs and sizes otherwise."""
    match = _NAME.fullmatch(name.strip().lower())
    if not match or match.group(1) not in GPUS:
        raise UserError(f"unknown GPU host {name!r}: one of {', '.join(GPUS)} and a GPU "
                        "count, e.g. h100-8 (one host of 8), h200-16 (two hosts), a100-1")
    count = int(match.group(2))
    if count not in (1, 2, 4) and (count < GPUS_PER_HOST or count % GPUS_PER_HOST):
        raise UserError(f"unknown GPU host {name!r}: 1, 2, 4 or a multiple of "
                        f"{GPUS_PER_HOST} GPUs ({GPUS_PER_HOST} to a host)")
    generation = match.group(1)
    usable = int(GPUS[generation].memory_mib * MIB * memory_fraction(environ))
    return GpuHosts(f"{generation}-{count}", generation, count, usable)


def memory_fraction(environ=os.environ) -> float:
    """The share of each GPU's memory a JAX process takes, as the run's environment sets it.

    That is XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.75."""
    value = environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "")
    try:
        fraction = float(value) if value else DEFAULT_MEM_FRACTION
    except ValueError:
        raise UserError(f"XLA_PYTHON_CLIENT_MEM_FRACTION={value!r} is not a number") from None
    if not 0 < fraction <= 1:
        raise UserError(f"XLA_PYTHON_CLIENT_MEM_FRACTION={value!r} is not in (0, 1]")
    return fraction


def installed_cuda() -> tuple[int, tuple[int, int, int]]:
    """(CUDA major version of jax's CUDA plugin, cuDNN version) installed here.

    UserError saying what to install otherwise. XLA builds cuDNN's attention graphs with the local
    cuDNN, so the target is described with its version."""
    for cuda in (13, 12):
        try:
            importlib.metadata.version(f"jax-cuda{cuda}-plugin")
            cudnn = importlib.metadata.version(f"nvidia-cudnn-cu{cuda}")
        except importlib.metadata.PackageNotFoundError:
            continue
        major, minor, patch = (int(part) for part in (cudnn.split(".") + ["0", "0"])[:3])
        return cuda, (major, minor, patch)
    raise UserError("compiling for GPU hosts needs jax's CUDA plugin and cuDNN, which are "
                    f"not installed: {INSTALL}")


def target_config(gpu: Gpu) -> str:
    """XLA's GpuTargetConfig for `gpu` in protobuf text format."""
    cuda, (cudnn_major, cudnn_minor, cudnn_patch) = installed_cuda()
    cc_major, cc_minor = gpu.compute_capability
    return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: {gpu.shared_memory_per_sm}
  threads_per_core_limit: 2048
  core_count: {gpu.sms}
  fpus_per_core: {gpu.fp32_units_per_sm}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {gpu.memory_bandwidth}
  l2_cache_size: {gpu.l2_bytes}
  clock_rate_ghz: {gpu.boost_clock_ghz}
  device_memory_size: {gpu.memory_mib * MIB}
  shared_memory_per_block_optin: {gpu.shared_memory_per_block_optin}
  cuda_compute_capability {{ major: {cc_major} minor: {cc_minor} }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: {cudnn_major} minor: {cudnn_minor} patch: {cudnn_patch} }}
runtime_version {{ major: {cuda} minor: 0 }}
device_description_str: "{gpu.device_kind}"
"""
