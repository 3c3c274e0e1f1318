"""bench_pretrain's bert_jax train step as XLA compiles it for an H200, read on a machine
without a GPU: each variant (bench_levers' names) compiled by XLA's compile-only CUDA
client (`bert_jax.aot`, the `gpu-compile` extra), its kernels sorted into matrix
products, fused attention, reductions (XLA's input fusions: LayerNorms, bias gradients,
amaxes), elementwise fusions and the rest, with the bytes each moves and a roofline
estimate (`bench/hlo_kernels.py`). It says which kernels a lever removes or shrinks.

Then each kind's estimate is scaled by how the fourth lease's profile of the bert-base
step (jax.nn.gelu then, hence the `jaxgelu` variant) compares with the model's for that
kind (2026-11-28: matrix products at 1.03x their estimate, cuDNN attention 2.83x,
reductions 1.52x, elementwise fusions 1.71x). The calibrated figure is a prediction for
the lease to check; the step's peak memory (XLA's plan) is beside it.

    python bench/gpu_step_model.py [--variants base128-jaxgelu,base128-fast,...]
        [--topology h200-1] [--top 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_levers  # noqa: E402
import bench_pretrain  # noqa: E402
import hlo_kernels  # noqa: E402

KINDS = ("gemm", "attention", "reduction", "elementwise", "other")
# The fourth lease's profile of bench_pretrain's bert-base seq 128 step (batch 256,
# jax.nn.gelu), ms by kind (docs/performance.md); its variant here is CALIBRATION_VARIANT.
PROFILE_MS = {"gemm": 23.9, "attention": 4.4, "reduction": 11.8, "elementwise": 9.4,
              "other": 1.2}
CALIBRATION_VARIANT = "base128-jaxgelu"


def step_kernels(variant: str, device, topology) -> tuple[list, float]:
    """(kernels, XLA's peak memory in GiB) of bench_pretrain's step for `variant`."""
    import jax
    v = bench_levers.parse_variant(variant)
    if v["side"] != "bert_jax" or v["cublaslt"]:
        sys.exit(f"gpu_step_model: {variant}: only bert_jax variants without XLA flags")
    model, seq_len, batch, predictions = bench_levers.CASES[v["case"]]
    args = types.SimpleNamespace(
        model=model, seq_len=seq_len, batch=batch, predictions=predictions,
        numerics=v["numerics"], packed=v["packed"], scan_layers=False,
        hidden_act=v["hidden_act"])
    from bert_jax.aot import compile as aot_compile
    with bench_pretrain.activation_kept(), aot_compile.cudnn_checks_for(topology):
        train, plan, partitioner, host_batch, _ = bench_pretrain.jax_step_parts(
            args, device, accelerator=True)
        batch_sharding = partitioner.batch_sharding
        abstract_batch = {k: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype,
                                                   sharding=batch_sharding)
                          for k, a in host_batch.items()}
        with jax.set_mesh(partitioner.mesh):
            compiled = train.lower(plan.abstract, abstract_batch).compile()
    text = compiled.as_text()
    if "\n  %while" in text[text.index("\nENTRY "):]:
        sys.exit(f"gpu_step_model: {variant}'s step has a loop; its body's kernels would be "
                 "counted once")
    return hlo_kernels.kernels(text), aot_compile.planned_bytes(compiled) / 2 ** 30


def by_kind(found) -> dict:
    return {kind: sum(k.seconds for k in found if k.kind == kind) * 1e3 for kind in KINDS}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="base128-jaxgelu,base128-fast,base128-tanh,"
                        "base128-fp8", help="bench_levers variants (bert_jax sides)")
    parser.add_argument("--topology", default="h200-1")
    parser.add_argument("--top", type=int, default=0,
                        help="list each variant's N longest kernels other than GEMMs")
    parser.add_argument("--by_origin", action="store_true",
                        help="each variant's calibrated time by the part of the step")
    args = parser.parse_args()
    variants = args.variants.split(",")
    if CALIBRATION_VARIANT not in variants:
        variants.insert(0, CALIBRATION_VARIANT)
    hlo_kernels.configure()
    from bert_jax.aot import compile as aot_compile
    topology = aot_compile.resolve_topology(args.topology)
    device = aot_compile.topology_devices(topology)[0]
    print(f"bench_pretrain's steps for {device.device_kind}, compiled here; model at "
          f"{hlo_kernels.BANDWIDTH / 1e12:.1f} TB/s, {hlo_kernels.BF16_FLOPS / 1e12:.0f} "
          "TFLOP/s bf16, FP8 twice that")
    compiled = {}  # variant -> (kernels, XLA's memory plan in GiB)
    for variant in variants:
        compiled[variant] = step_kernels(variant, device, topology)
        if args.top:
            print(f"{variant}: " + hlo_kernels.describe(compiled[variant][0], top=args.top,
                                                        gemms=False))
    reference = by_kind(compiled[CALIBRATION_VARIANT][0])
    # A kind the model puts (almost) no time in keeps the profile's time as a constant.
    scale = {k: PROFILE_MS[k] / reference[k] for k in KINDS if reference[k] > 0.1}
    calibrate = lambda ms: {k: ms[k] * scale[k] if k in scale else PROFILE_MS[k]
                            for k in KINDS}
    print("calibration (profile / model): " + ", ".join(
        f"{k} {scale[k]:.2f}x" if k in scale else f"{k} +{PROFILE_MS[k]} ms" for k in KINDS))
    print(f"{'variant':<22}{'kernels':>8}{'GB':>7}{'model ms':>10}{'calibr. ms':>12}"
          f"{'vs jaxgelu':>12}{'GiB':>7}   calibrated ms by kind")
    totals = {v: sum(calibrate(by_kind(found)).values()) for v, (found, _) in compiled.items()}
    for variant, (found, peak_gib) in compiled.items():
        ms = by_kind(found)
        calibrated = calibrate(ms)
        moved = sum(k.read + k.written for k in found) / 1e9
        # Against the same case with jax.nn.gelu (the form the leases measured), if run.
        before = totals.get(variant.split("-")[0] + "-jaxgelu")
        print(f"{variant:<22}{len(found):>8}{moved:>7.1f}{sum(ms.values()):>10.2f}"
              f"{totals[variant]:>12.2f}"
              + (f"{before / totals[variant]:>11.3f}x" if before else f"{'':>12}")
              + f"{peak_gib:>7.1f}   " + ", ".join(f"{k} {calibrated[k]:.1f}" for k in KINDS))
    if args.by_origin:
        for variant, (found, _) in compiled.items():
            parts: dict = {}
            for k in found:  # each kernel at its kind's calibration
                parts[k.origin] = parts.get(k.origin, 0.0) + k.seconds * 1e3 * scale.get(
                    k.kind, 1.0)
            print(f"{variant} by part, calibrated ms (other kernels: uncalibrated): " + ", ".join(
                f"{p} {ms:.1f}" for p, ms in sorted(parts.items(), key=lambda x: -x[1])))


if __name__ == "__main__":
    main()
