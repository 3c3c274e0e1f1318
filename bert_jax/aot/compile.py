"""`bert-jax compile`: a pretraining run's exact train step compiled for a TPU slice or GPU hosts.

It runs on any machine (no accelerator needed; the `tpu` extra brings libtpu, the `gpu-compile`
extra jax's CUDA plugin and cuDNN), to check before paying for the slice or the hosts that it fits,
and what it computes and communicates.

    bert-jax compile --config configs/pretrain.py:tpu_large --topology v4-128 \
        [--num_slices 2] [--config.KEY=VALUE ...]
    bert-jax compile --config configs/pretrain.py:gpu_large_512 --topology h100-16 \
        --config.global_batch_size=512

The step is `pretrain.setup.Setup`'s (the same model, TrainState, optimizer, shardings,
accumulation, remat, scan and donation as `bert-jax pretrain`), lowered on
ShapeDtypeStructs over the devices of `jax.experimental.topologies.get_topology_desc`.
It prints the slice, the mesh, per-chip HBM (parameters + optimizer state, temporaries,
total against the chip's), XLA's FLOPs next to the model's, the bytes a chip moves per
step by collective kind (`bert_jax.aot.collectives`), the fused attention kernels and
the compile time, then one line of JSON. A config that does not fit exits 2 with one
line naming the shortfall. XLA's `optimal_seconds` is not reported: it is no step time
for this program (negative, loop bodies counted once).

For GPUs (`bert_jax.aot.gpu_hosts`) a GPU's capacity is the share of its memory JAX
takes (XLA_PYTHON_CLIENT_MEM_FRACTION, 0.75 by default), XLA's compile-only client
reports no FLOPs, and with no GPU to time them it does not autotune: its kernel choices
(Triton or cuBLAS for each matrix product) can differ from a run's, its memory plan and
communication are the program's.
"""

from __future__ import annotations

import contextlib
import re
import time

import jax
import numpy as np

from bert_jax.aot import collectives, gpu_hosts, tpu_slices
from bert_jax.errors import UserError, is_out_of_memory, memory_levers
from bert_jax.models import jax_compat
from bert_jax.pretrain.setup import Setup
from bert_jax.weights import pretrained

GIB = tpu_slices.GIB
# A recommended configuration leaves this share of HBM free; on GPUs more, since a run
# peaks above XLA's plan (`_capacity_note`).
HEADROOM = {"tpu": 0.10, "gpu": 0.15}


class DoesNotFit(UserError):
    """The step needs more HBM per chip than the chip has."""


def _vocab_size(config) -> int:
    """The model's vocab_size if the config sets one, else the run's vocabulary's.

    The vocabulary is the one pretraining picks (config.tokenizer, init_from's, or the bundled
    vocabulary), read without converting or loading a model."""
    model = config.model
    if not isinstance(model, str) and "vocab_size" in model:
        return int(model["vocab_size"])
    if config.init_from and not config.tokenizer:
        return pretrained.model_config(config.init_from).vocab_size
    from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
    return load_tokenizer(config.tokenizer or DEFAULT_VOCAB).vocab_size


def resolve_topology(name: str):
    """A TPU slice (`v4-128`) or GPU hosts (`h100-16`) by name."""
    return gpu_hosts.resolve_hosts(name) if gpu_hosts.matches(name) else tpu_slices.resolve(name)


def topology_devices(topology, num_slices: int = 1) -> list:
    """The devices of `num_slices` slices of `topology`, for compiling only.

    `topology` is a TPU slice or GPU hosts."""
    from jax.experimental import topologies as jax_topologies
    if num_slices < 1:
        raise UserError(f"--num_slices must be at least 1, got {num_slices}")
    try:
        return list(jax_topologies.get_topology_desc(**topology.describe_args(num_slices)).devices)
    except RuntimeError as e:
        if "not installed" not in str(e):
            raise
        raise UserError("compiling for a TPU topology needs libtpu, which is not installed: "
                        "pip install -e .[tpu] (no TPU needed)") from e


def _shortfall_from_error(error: Exception) -> float | None:
    """GiB over capacity from XLA's RESOURCE_EXHAUSTED message, when it says."""
    text = str(error)
    over = re.search(r"[Ee]xceeded \w+ capacity by ([\d.]+)([GMK])", text)
    if over:
        return float(over.group(1)) / {"G": 1, "M": 1024, "K": 1024 ** 2}[over.group(2)]
    used = re.findall(r"([\d.]+)G\b", text)
    return float(used[0]) - float(used[1]) if len(used) >= 2 else None


def compile_step(config, topology, num_slices: int = 1,
                 hlo_out: str = "", progress=lambda line: None) -> dict:
    """Compiles `config`'s train step for `num_slices` slices of `topology`; returns the report.

    The report holds the JSON's fields, plus 'details' for the printout. Raises DoesNotFit when XLA
    refuses for memory. `progress(line)` is told each phase as it starts (the compile itself can
    take minutes in silence)."""
    if config.teacher:
        raise UserError("compile does not build distillation runs (config.teacher) yet")
    progress(f"building the model and its sharding over {topology.name}"
             f"{f' x{num_slices}' if num_slices > 1 else ''}")
    devices = topology_devices(topology, num_slices)
    hosts = len({d.process_index for d in devices})
    setup = Setup.build(config, _vocab_size(config), devices=devices, process_count=hosts)
    state_bytes = _state_bytes_per_chip(setup.state_plan.abstract)
    if state_bytes > topology.hbm_bytes:  # no need to compile to know
        raise DoesNotFit(
            f"{config_name(config)} does not fit {topology.name}: its parameters and "
            f"optimizer state alone take {state_bytes / GIB:.2f} GiB per chip, "
            f"{(state_bytes - topology.hbm_bytes) / GIB:.2f} GiB more than the "
            f"{topology.hbm_bytes / GIB:.0f} GiB of HBM; {memory_levers(config.grad_accum_steps)}")
    train_fn, _ = setup.jit_steps()
    start = time.perf_counter()
    with jax.set_mesh(setup.partitioner.mesh), cudnn_checks_for(topology):
        progress("tracing the train step")
        lowered = train_fn.lower(setup.state_plan.abstract, setup.abstract_batch())
        progress("XLA is compiling the train step (about a minute for a base model)")
        try:
            compiled = lowered.compile()
        except Exception as e:  # noqa: BLE001 - XLA's error type differs across versions
            if not is_out_of_memory(e):
                raise
            short = _shortfall_from_error(e)
            raise DoesNotFit(
                f"{config_name(config)} does not fit {topology.name}: XLA refused, "
                + (f"{short:.2f} GiB per chip over the {topology.hbm_bytes / GIB:.0f} GiB of "
                   "HBM" if short is not None else f"out of HBM ({' '.join(str(e).split())[:200]})")
                + f"; {memory_levers(config.grad_accum_steps)}") from None
    compile_s = time.perf_counter() - start
    if hlo_out:
        with open(hlo_out, "w", encoding="utf-8") as f:
            f.write(compiled.as_text())
    return _report(config, topology, setup, compiled, hosts, num_slices, compile_s)


@contextlib.contextmanager
def cudnn_checks_for(topology):
    """Makes jax's cuDNN check answer for the target GPU hosts' GPU while compiling for them.

    jax's cuDNN attention asks the local default backend for the GPU's compute capability, which on
    a machine without a GPU answers "none": packed rows (Hopper and later) would be refused when
    compiling for H100s here. While compiling for GPU hosts the check answers for their GPU. (A
    private jax function, `jax_compat.cudnn_attention`: where it is gone, nothing is changed.)"""
    try:
        cudnn_attention = jax_compat.cudnn_attention()
    except ImportError:
        cudnn_attention = None
    kept = getattr(cudnn_attention, "check_compute_capability", None)
    if topology.platform != "gpu" or kept is None:
        yield
        return
    target = topology.gpu.compute_capability
    cudnn_attention.check_compute_capability = lambda capability: target >= tuple(
        int(part) for part in capability.split("."))
    try:
        yield
    finally:
        cudnn_attention.check_compute_capability = kept


def config_name(config) -> str:
    model = config.model if isinstance(config.model, str) else config.model.get("preset", "model")
    return (f"{model} (seq {config.max_seq_length}, batch {config.global_batch_size}, "
            f"mesh {dict(config.mesh_shape)})")


def _state_bytes_per_chip(state) -> int:
    """Bytes of the TrainState's largest shard on one chip."""
    total = 0
    for leaf in jax.tree.leaves(state):
        shard = leaf.sharding.shard_shape(leaf.shape)
        total += int(np.prod(shard)) * np.dtype(leaf.dtype).itemsize
    return total


def _report(config, topology, setup, compiled, hosts, num_slices, compile_s) -> dict:
    mesh, chips = setup.partitioner.mesh, setup.partitioner.mesh.devices.size
    memory = compiled.memory_analysis()
    total = planned_bytes(compiled)
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}  # GPU: None
    flat, text = list(mesh.devices.flat), compiled.as_text()
    bytes_by_kind = collectives.collective_bytes(text, chips // num_slices, num_slices)
    model_flops = setup.model_flops_per_step()
    batch_ways = setup.partitioner.batch_shards
    return {
        "topology": topology.name, "chips": chips, "hosts": hosts, "slices": num_slices,
        "mesh": {k: int(v) for k, v in mesh.shape.items()},
        "fits": total <= topology.hbm_bytes,
        "hbm_per_chip_gb": round(total / GIB, 3),
        "hbm_capacity_gb": round(topology.hbm_bytes / GIB, 3),
        "params_and_opt_gb": round(_state_bytes_per_chip(setup.state_plan.abstract) / GIB, 3),
        "temp_gb": round(memory.temp_size_in_bytes / GIB, 3),
        "flops_per_step": float(cost["flops"]) * chips if "flops" in cost else None,
        "model_flops_per_step": float(model_flops),
        "collective_bytes": {k: int(v) for k, v in sorted(bytes_by_kind.items())},
        "compile_s": round(compile_s, 1),
        "fused_attention_calls": _fused_attention_calls(text),
        "details": {"device_kind": flat[0].device_kind, "platform": topology.platform,
                    "capacity": _capacity_note(topology),
                    "per_chip_batch": config.global_batch_size / batch_ways,
                    "grad_accum_steps": config.grad_accum_steps,
                    "remat_policy": config.remat_policy, "scan_layers": config.scan_layers},
    }


_FUSED_ATTENTION = {"tpu": "Pallas splash attention", "gpu": "cuDNN flash attention"}


def _capacity_note(topology) -> str:
    """For GPUs: what the capacity is, and that a run needs more than XLA's plan.

    cuBLAS workspaces and autotuning take more: measured on H200s, bert-base and bert-large steps
    peaked 13-14% above their plans (docs/results.md)."""
    if topology.platform == "tpu":
        return ""
    total = topology.gpu.memory_mib * gpu_hosts.MIB / GIB
    return (f"; JAX's {topology.hbm_bytes / GIB / total:.0%} of {total:.0f} GiB "
            "(XLA_PYTHON_CLIENT_MEM_FRACTION); a run peaks ~15% above this plan")


def planned_bytes(compiled) -> int:
    """One device's memory in XLA's plan for `compiled`.

    That is arguments + outputs - donated aliases + temporaries."""
    memory = compiled.memory_analysis()
    return (memory.argument_size_in_bytes + memory.output_size_in_bytes
            - memory.alias_size_in_bytes + memory.temp_size_in_bytes)


def _fused_attention_calls(hlo_text: str) -> int:
    """Fused attention kernels in the compiled step, forward and backward.

    Pallas splash attention on TPU (packed rows), cuDNN's flash attention on GPU."""
    return sum(('custom_call_target="tpu_custom_call"' in line and "%splash" in line)
               or 'custom_call_target="__cudnn$fmha' in line
               for line in hlo_text.splitlines())


def _count(n: int, noun: str) -> str:
    """'1 host', '2 hosts'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _gb(x: float) -> str:
    return f"{x / 1e9:,.2f} GB" if x >= 1e8 else f"{x / 1e6:,.1f} MB"


def format_report(report: dict) -> str:
    d = report["details"]
    lines = [
        f"topology  {report['topology']} ({d['device_kind']}): {_count(report['chips'], 'chip')}"
        f", {_count(report['hosts'], 'host')}, {_count(report['slices'], 'slice')}",
        f"mesh      {report['mesh']}; per-chip batch {d['per_chip_batch']:g}, "
        f"grad_accum_steps {d['grad_accum_steps']}, remat {d['remat_policy']}, "
        f"scan_layers {d['scan_layers']}",
        f"HBM/chip  {report['hbm_per_chip_gb']:.2f} GiB of {report['hbm_capacity_gb']:.0f} GiB"
        f" ({'fits' if report['fits'] else 'DOES NOT FIT'}): parameters + optimizer "
        f"{report['params_and_opt_gb']:.2f} GiB, temporaries {report['temp_gb']:.2f} GiB"
        + d["capacity"],
        "FLOPs     XLA " + (f"{report['flops_per_step']:.3e} per step (loop bodies counted "
                             "once)" if report["flops_per_step"] is not None else "n/a")
        + f", model {report['model_flops_per_step']:.3e}",
        "comms     per chip per step: " + (", ".join(
            f"{k} {_gb(v)}" for k, v in report["collective_bytes"].items()) or "none"),
        "attention " + (f"{_FUSED_ATTENTION[d['platform']]} ({report['fused_attention_calls']}"
                        " kernel calls)" if report["fused_attention_calls"] else "XLA"),
        f"compiled  in {report['compile_s']:.1f} s",
    ]
    return "\n".join(lines)
