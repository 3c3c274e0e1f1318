"""Each speed lever alone: bench_pretrain's workers on named variants, one process each,
in the order given, printing a row as each finishes and one JSON line at the end.

    python bench/bench_levers.py --variants large512-fast,large512-fp8,... [--steps 10]
        [--out FILE]

A variant is CASE-SETTING[+SETTING...]: CASE one of CASES (model, seq, batch,
predictions), SETTING `fast`, `fp8`, `faithful`, `packed`, `tanh` (BERT's original tanh
GELU, which cuBLASLt can fuse into its matmul epilogue), `jaxgelu` (BERT's erf GELU as
jax.nn.gelu, the form before `activations.exact_gelu`), `cublaslt` (XLA_FLAGS
--xla_gpu_enable_cublaslt=true), or a torch side (`torch_eager`, `torch_compile`).
`--out` appends each result as a JSON line as soon as it is measured, so a run cut
short keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_pretrain  # noqa: E402

# name: (model, seq_len, batch, predictions); tiny128 is for a quick run on a CPU.
CASES = {"tiny128": ("tiny", 128, 8, 20), "base128": ("bert-base", 128, 256, 20),
         "large128": ("bert-large", 128, 128, 20), "large512": ("bert-large", 512, 32, 80)}
NUMERICS = ("fast", "fp8", "faithful")
FLAGS = {"packed", "tanh", "jaxgelu", "cublaslt"}
TORCH = ("torch_eager", "torch_compile")


def parse_variant(name: str) -> dict:
    case, _, settings = name.partition("-")
    if case not in CASES:
        sys.exit(f"bench_levers: unknown case {case!r} in {name!r}; known: {sorted(CASES)}")
    parts = settings.split("+") if settings else ["fast"]
    unknown = set(parts) - FLAGS - set(NUMERICS) - set(TORCH)
    if unknown:
        sys.exit(f"bench_levers: unknown setting(s) {sorted(unknown)} in {name!r}")
    side = next((p for p in parts if p in TORCH), "bert_jax")
    return {"case": case, "side": side,
            "numerics": next((p for p in parts if p in NUMERICS), "fast"),
            "packed": "packed" in parts, "cublaslt": "cublaslt" in parts,
            "hidden_act": ("gelu_new" if "tanh" in parts else
                           bench_pretrain.JAX_GELU if "jaxgelu" in parts else None)}


def run(name: str, steps: int, peak: float) -> dict | None:
    from bert_jax.models.presets import preset
    from bert_jax.train import perf
    v = parse_variant(name)
    model, seq_len, batch, predictions = CASES[v["case"]]
    out = bench_pretrain.run_worker(
        v["side"], xla_flags="--xla_gpu_enable_cublaslt=true" if v["cublaslt"] else "",
        model=model, seq_len=seq_len, batch=batch, predictions=predictions, steps=steps,
        numerics=v["numerics"], packed=v["packed"],
        hidden_act=v["hidden_act"])
    if out is None:
        return None
    flops = batch * perf.train_flops_per_example(preset(model), seq_len, predictions)
    return {"variant": name, "model": model, "seq_len": seq_len, "batch": batch,
            "seq_per_s": batch / out["step_s"], "samples_per_s": out["examples"] / out["step_s"],
            "mfu": flops / out["step_s"] / peak, "first_step_s": out["first_step_s"],
            "peak_memory_gb": out["peak_memory_gb"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", required=True, help="comma-separated, run in order")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default=None, help="append each result as a JSON line")
    args = parser.parse_args()
    names = args.variants.split(",")
    for name in names:
        parse_variant(name)  # every name checked before the first compile
    probe = bench_pretrain.run_worker("probe")
    if probe is None:
        sys.exit("bench_levers: the JAX probe process failed")
    print(f"backend {probe['backend']}, device {probe['device']}, {args.steps} timed steps")
    print(f"{'variant':<30}{'seq/s':>9}{'samples/s':>10}{'MFU':>7}{'first s':>9}{'peak GB':>9}",
          flush=True)
    results = []
    for name in names:
        row = run(name, args.steps, probe["peak"])
        if row is None:
            continue
        results.append(row)
        print(f"{name:<30}{row['seq_per_s']:>9.1f}{row['samples_per_s']:>10.1f}"
              f"{row['mfu']:>7.1%}{row['first_step_s']:>9.1f}{row['peak_memory_gb']:>9.2f}",
              flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    print(json.dumps({"backend": probe["backend"], "device": probe["device"],
                      "results": results}))
    if len(results) < len(names):
        sys.exit(f"bench_levers: {len(names) - len(results)} of {len(names)} variants failed")


if __name__ == "__main__":
    main()
