"""Where a pretraining step's time goes: traces a few steps of bench_pretrain's bert_jax
case with `jax.profiler.trace` and sums the step's kernels (GPU) or XLA ops (CPU).

    python bench/profile_pretrain.py [--model bert-base] [--seq_len 128] [--batch 256]
        [--predictions 20] [--numerics fast|faithful] [--steps 3] [--trace_dir DIR]

Defaults: bench_pretrain's bert-base case on an accelerator, tiny batch 8 on a CPU.
Prints the device's busy and idle time per step, the time by kind of kernel (matmul,
attention, elementwise and reduction fusions, copies) and the costliest kernels; last
line one JSON object {"model", "seq_len", "batch", "numerics", "step_ms", "busy_ms",
"idle_ms", "by_kind_ms": {kind: ms}, "top": [[name, ms, calls per step]]}. The trace
(Perfetto JSON, and TensorBoard's xplane) stays in --trace_dir. On a CPU the ops run
on several threads at once, so busy time can exceed the step time.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_pretrain  # noqa: E402  (the case and its step)

# Kinds by kernel name: cuBLAS/cuDNN/Triton kernel names on GPUs, HLO op names on CPUs
# (XLA:CPU runs its dots as YNNPACK "ynn_fusion"s). XLA:GPU prefixes elementwise fusions
# "loop_" and reduction or concatenate ones "input_".
KINDS = (("matmul", r"nvjet|gemm|cublas|cutlass|splitK|^dot|convolution|^ynn_fusion"),
         ("attention (cuDNN)", r"cudnn|sdpa|fmha|flash"),
         ("copy, memset", r"^copy|memset|memcpy|transpose"),
         ("elementwise fusion", r"^loop_"),
         ("reduction fusion", r"^input_|^wrapped_|reduce"),
         ("other fusion", r"fusion"))


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def step_events(trace_path, module="jit_train_step"):
    """The trace's complete events that ran the train step's compiled module."""
    with gzip.open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X"
            and (e.get("args") or {}).get("hlo_module") == module]


def summarize(events, steps, top=25):
    """Busy and idle time, time by kind and the costliest kernels, in ms per step."""
    by_kind, by_name, calls = collections.Counter(), collections.Counter(), collections.Counter()
    spans = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events)
    for e in events:
        by_kind[kind_of(e["name"])] += e.get("dur", 0)
        by_name[e["name"]] += e.get("dur", 0)
        calls[e["name"]] += 1
    idle, end = 0.0, spans[0][1] if spans else 0.0
    for start, stop in spans[1:]:
        idle += max(0.0, start - end)
        end = max(end, stop)
    per_step = lambda us: round(us / 1e3 / steps, 3)
    return {"busy_ms": per_step(sum(by_kind.values())), "idle_ms": per_step(idle),
            "by_kind_ms": {k: per_step(v) for k, v in by_kind.most_common()},
            "top": [[n, per_step(v), calls[n] // steps] for n, v in by_name.most_common(top)]}


def main():
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--numerics", choices=("fast", "faithful"), default=None,
                        help="default: fast on accelerators, faithful on CPU")
    parser.add_argument("--steps", type=int, default=3, help="traced steps")
    parser.add_argument("--trace_dir", default=None, help="default: a new temporary folder")
    args = parser.parse_args()
    import jax
    accelerator = jax.default_backend() != "cpu"
    args.model = args.model or ("bert-base" if accelerator else "tiny")
    args.batch = args.batch or (256 if accelerator else 8)
    args.numerics = args.numerics or ("fast" if accelerator else "faithful")
    args.scan_layers = False
    trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="bert_jax_profile_")

    step, sync = bench_pretrain.jax_step(args)
    for _ in range(3):  # compile, allocate, autotune outside the trace
        step()
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    step_ms = (time.perf_counter() - start) / args.steps * 1e3
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        for _ in range(args.steps):
            step()
        sync()
    trace = sorted(glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"),
                             recursive=True))[-1]
    events = step_events(trace)
    if not events:
        sys.exit(f"profile_pretrain: no kernel of the train step in {trace}")
    summary = summarize(events, args.steps)

    print(f"{args.model} seq {args.seq_len} batch {args.batch}, {args.numerics} numerics, "
          f"{jax.devices()[0].device_kind}: {step_ms:.1f} ms a step untraced; device busy "
          f"{summary['busy_ms']:.1f} ms, idle {summary['idle_ms']:.1f} ms a step; "
          f"trace {trace}")
    busy = summary["busy_ms"] or 1.0
    for kind, ms in summary["by_kind_ms"].items():
        print(f"  {kind:<20}{ms:9.2f} ms {100 * ms / busy:5.1f}%")
    print("  costliest kernels (ms a step, calls a step):")
    for name, ms, count in summary["top"]:
        print(f"  {ms:9.3f} {count:4d}  {name[:100]}")
    print(json.dumps({"model": args.model, "seq_len": args.seq_len, "batch": args.batch,
                      "numerics": args.numerics, "step_ms": round(step_ms, 3), **summary}))


if __name__ == "__main__":
    main()
