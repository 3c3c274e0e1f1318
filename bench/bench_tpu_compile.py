"""The TPU table of docs/results.md: `bert-jax compile` for BERT-base and BERT-large at
sequence 128 and 512 on TPU slices, at a fixed batch per chip (so per-chip HBM should not
move with the slice size).

  python bench/bench_tpu_compile.py [--models base,large] [--seqs 128,512]
      [--topologies v4-8,v4-128,...] [--workers 2] [--out FILE.jsonl]

Each case is the `tpu_base` or `tpu_large` recipe (data parallel and FSDP
respectively, as shipped) with global_batch_size = per-chip batch x chips; each
compiles in its own process, two at a time by default, and is cached under
CACHE_ROOT/tpu_compile (`bert_jax.aot.search.run_case`), so an interrupted run
continues where it stopped. Needs the `tpu` extra; each case takes 1.5 to 10 minutes of
a 2-core CPU and 2 to 8 GB of RAM. Prints one JSON line per case and a Markdown table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bert_jax.aot import search as tpu_search  # noqa: E402
from bert_jax.aot import tpu_slices  # noqa: E402

TOPOLOGIES = ("v4-8", "v4-128", "v5e-16", "v5e-256", "v5p-8", "v5p-128", "v6e-8", "v6e-256")
# Rows per chip by (model, sequence length): base 16k tokens per chip, large 8k (tpu_large's
# 4096 rows on a v4-128); seq 512 with 80 predictions per row.
PER_CHIP = {("base", 128): 128, ("base", 512): 32, ("large", 128): 64, ("large", 512): 16}


def case(model: str, seq: int, topology: str) -> tuple[str, list[str]]:
    chips = tpu_slices.resolve(topology).chips
    overrides = [f"global_batch_size={PER_CHIP[model, seq] * chips}", f"max_seq_length={seq}",
                 f"max_predictions_per_seq={20 if seq == 128 else 80}"]
    return f"{os.path.join(ROOT, 'configs', 'pretrain.py')}:tpu_{model}", overrides


def main() -> None:
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="base,large")
    parser.add_argument("--seqs", default="128,512")
    parser.add_argument("--topologies", default=",".join(TOPOLOGIES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    cases = [(m, int(s), t) for m in args.models.split(",") for s in args.seqs.split(",")
             for t in args.topologies.split(",")]

    def run(item):
        model, seq, topology = item
        config, overrides = case(model, seq, topology)
        return item, tpu_search.run_case(config, overrides, topology, 1)

    rows = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool:
        for (model, seq, topology), report in pool.map(run, cases):
            row = {"model": model, "seq": seq, "per_chip_batch": PER_CHIP[model, seq],
                   **report}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
    print("\n| model | seq | topology | batch/chip | mesh | fits | HBM/chip GiB (params+opt, temp) "
          "| comm GB/chip/step | compile s |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['seq']} | {r.get('topology', '')} | "
                  f"{r['per_chip_batch']} | | no | {r['error'][-80:]} | | |")
            continue
        mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items() if v > 1)
        comm = sum(r["collective_bytes"].values()) / 1e9
        print(f"| {r['model']} | {r['seq']} | {r['topology']} | {r['per_chip_batch']} | {mesh} "
              f"| {'yes' if r['fits'] else 'no'} | {r['hbm_per_chip_gb']:.2f} "
              f"({r['params_and_opt_gb']:.2f}, {r['temp_gb']:.2f}) of "
              f"{r['hbm_capacity_gb']:.0f} | {comm:.2f} | {r['compile_s']:.0f} |")


if __name__ == "__main__":
    main()
