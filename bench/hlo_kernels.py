"""What XLA's GPU compiler makes of a program, read on a machine without a GPU: the
program is compiled for an H200 by XLA's compile-only CUDA client (`bert_jax.aot`; the
`gpu-compile` extra), and each kernel of the compiled program is listed with the bytes
it reads and writes and, for matrix products, its FLOPs. A roofline estimate turns that
into time: each kernel takes the longer of its bytes at the memory bandwidth and its
FLOPs at the matrix-product rate, both as measured on an H200 (about 4.3 TB/s copying;
753 TFLOP/s for bf16 products of bert-large's feed-forward shape, docs/results.md), FP8
products at twice the bf16 rate, and no kernel under LAUNCH_S.

It is a model, not a measurement: it knows what is fused and what goes through memory,
not how well each kernel runs. With no GPU XLA does not autotune, so matrix products are
compiled as cuBLAS calls here (`--xla_gpu_enable_triton_gemm=false`), as an H200 ran
them (its profile of the bert-base step, its FP8 GEMMs). `bench/check_gpu_paths.py --aot`
uses it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BANDWIDTH = 4.3e12      # bytes/s, a device-to-device copy on an H200
BF16_FLOPS = 753e12     # the FFN-sized bf16 product on an H200 (docs/results.md)
FP8_FLOPS = 2 * BF16_FLOPS
LAUNCH_S = 2e-6
NOT_KERNELS = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant",
               "after-all", "opt-barrier", "while", "call", "conditional", "partition-id",
               "replica-id"}
BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2, "u16": 2,
         "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_ARRAY = re.compile(r"\b([a-z0-9]+)\[([\d,]*)\]")
_LINE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\(.*?\)|[a-z0-9]+\[[\d,]*\](?:\{[^}]*\})?) "
                   r"([\w\-]+)\((.*?)\)(.*)$")


def configure() -> None:
    """Before JAX starts: the plugins quiet (as the CLI has them), GEMMs as cuBLAS calls."""
    from bert_jax.host import backend_env
    backend_env.configure_backends()
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_enable_triton_gemm" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_gpu_enable_triton_gemm=false".strip()


def gpu_devices(topology: str = "h200-1"):
    """The compile-only devices of `topology` (GPU hosts, `bert_jax.aot.gpu_hosts`)."""
    from bert_jax.aot import compile as aot_compile
    topology = aot_compile.resolve_topology(topology)
    return aot_compile.topology_devices(topology)


def compile_for(fn, args, device):
    """`jax.jit(fn)` compiled for `device` on abstract copies of `args`."""
    import jax
    sharding = jax.sharding.SingleDeviceSharding(device)
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype,
                                                           sharding=sharding), args)
    return jax.jit(fn).lower(*abstract).compile()


@dataclasses.dataclass
class Kernel:
    name: str
    op: str
    read: int
    written: int
    flops: float
    fp8: bool
    detail: str
    kind: str   # gemm, attention, reduction (XLA's input fusions), elementwise, other

    @property
    def seconds(self) -> float:
        rate = FP8_FLOPS if self.fp8 else BF16_FLOPS
        return max(LAUNCH_S, (self.read + self.written) / BANDWIDTH, self.flops / rate)


def _arrays(text: str) -> list[tuple[str, list[int]]]:
    return [(dtype, [int(d) for d in dims.split(",") if d])
            for dtype, dims in _ARRAY.findall(text) if dtype in BYTES]


def _bytes(arrays) -> int:
    return sum(BYTES[dtype] * math.prod(dims) for dtype, dims in arrays)


def kernels(hlo_text: str) -> list[Kernel]:
    """The kernels of the compiled module's entry computation, in order."""
    entry = hlo_text[hlo_text.index("\nENTRY "):]
    shapes, found = {}, []
    for line in entry.splitlines()[1:]:
        match = _LINE.match(line)
        if not match:
            continue
        name, type_text, op, operands, rest = match.groups()
        out = _arrays(type_text)
        shapes[name] = out
        if op in NOT_KERNELS:
            continue
        ins = [shapes.get(o.strip().lstrip("%"), []) for o in operands.split(",")]
        flops, fp8, detail = 0.0, False, ""
        target = re.search(r'custom_call_target="([^"]+)"', rest)
        fusion_kind = re.search(r"kind=k(\w+)", rest)
        kind = {"Input": "reduction", "Loop": "elementwise"}.get(
            fusion_kind.group(1) if fusion_kind else "", "other")
        if target:
            detail = target.group(1)
            if "fmha" in detail and ins and ins[0]:
                kind, flops = "attention", _attention_flops(ins[0][0][1], "Backward" in detail)
        config = re.search(r'"gemm_backend_config":(\{.*?"dot_dimension_numbers":\{.*?\}.*?\})',
                           rest)
        if config and ins and ins[0]:
            numbers = json.loads(re.search(r'"dot_dimension_numbers":(\{.*?\})',
                                           config.group(1)).group(1))
            lhs_dims = ins[0][0][1]
            k = math.prod(lhs_dims[int(i)] for i in numbers["lhs_contracting_dimensions"])
            flops = 2.0 * math.prod(out[0][1]) * k
            fp8, kind = ins[0][0][0].startswith("f8"), "gemm"
            epilogue = re.search(r'"epilogue":"(\w+)"', rest)
            if epilogue and epilogue.group(1) != "DEFAULT":
                detail += f" +{epilogue.group(1)}"
        read = sum(_bytes(i) for i in ins)
        # A GEMM's workspace output (s8/u8) is scratch, not a result written back.
        written = _bytes([a for a in out if not (target and a[0] in ("s8", "u8"))])
        found.append(Kernel(name, op, read, written, flops, fp8, detail, kind))
    return found


def _attention_flops(q_dims: list[int], backward: bool) -> float:
    """cuDNN flash attention on q of [B, H, L, D] or [B, L, H, D] (self-attention, so L is
    the larger middle dimension in BERT): two products forward, five backward (the
    scores recomputed, then dV, dP, dQ and dK)."""
    length = max(q_dims[1], q_dims[2])
    return (5 if backward else 2) * 2.0 * math.prod(q_dims) * length


def summary(found: list[Kernel]) -> dict:
    gemms = [k for k in found if k.kind == "gemm"]
    return {"kernels": len(found), "gemms": len(gemms),
            "fp8_gemms": sum(k.fp8 for k in gemms),
            "gb_moved": sum(k.read + k.written for k in found) / 1e9,
            "estimate_ms": sum(k.seconds for k in found) * 1e3,
            "non_gemm_ms": sum(k.seconds for k in found if k.kind != "gemm") * 1e3}


def describe(found: list[Kernel], top: int = 0, gemms: bool = True) -> str:
    s = summary(found)
    line = (f"{s['kernels']} kernels ({s['gemms']} GEMMs, {s['fp8_gemms']} FP8), "
            f"{s['gb_moved']:.2f} GB moved, estimate {s['estimate_ms']:.3f} ms "
            f"({s['non_gemm_ms']:.3f} ms outside GEMMs)")
    if top:
        heavy = sorted((k for k in found if gemms or k.kind != "gemm"),
                       key=lambda k: -k.seconds)[:top]
        line += "".join(f"\n    {k.seconds * 1e3:7.3f} ms  {k.kind:<11} {k.name:<40} "
                        f"read {k.read / 1e6:8.1f} MB  wrote {k.written / 1e6:8.1f} MB  "
                        f"{k.detail}" for k in heavy)
    return line
