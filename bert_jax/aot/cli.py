"""`bert-jax compile` (`bert_jax.aot.compile`): flags, the search, what is printed.

The search runs over mesh splits, remat and accumulation (`bert_jax.aot.search`)."""

from __future__ import annotations

import argparse
import json
import sys

import jax

from bert_jax import flags
from bert_jax.aot import compile as aot_compile
from bert_jax.aot import gpu_hosts, search, tpu_slices
from bert_jax.errors import check_positive, memory_levers
from bert_jax.train import job_cli
from bert_jax.train.config_loader import load_config


def compile_main(argv: list[str]) -> int:
    """`bert-jax compile`: parses `argv`, then compiles the step and reports.

    With --search it compiles each candidate; a config that does not fit raises
    `aot_compile.DoesNotFit`."""
    parser = flags.ArgumentParser(
        prog="bert-jax compile", description=aot_compile.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Override any config key with --config.KEY=VALUE. TPU slices: "
               + ", ".join(tpu_slices.names()) + ". GPU hosts (8 GPUs a host), e.g.: "
               + ", ".join(gpu_hosts.example_names()))
    parser.add_argument("--config", required=True, help="configs/pretrain.py[:VARIANT]")
    parser.add_argument("--topology", required=True,
                        help="a TPU slice (v4-128, v5e-16, v5p-8, v6e-256) or GPU hosts "
                        "(h100-8, h200-16, a100-1)")
    parser.add_argument("--num_slices", type=int, default=1,
                        help="slices joined over the data-center network (multi-slice)")
    parser.add_argument("--hlo_out", default="",
                        help="also write the compiled program's HLO text to this file")
    parser.add_argument("--search", action="store_true",
                        help="try mesh splits, remat and accumulation; table + recommendation")
    parser.add_argument("--workers", type=int, default=2,
                        help="with --search: compiles at once (each takes 2-8 GB of RAM)")
    args, overrides = job_cli.split_config_args(argv)
    args = parser.parse_args(args)
    # A compile-only client can neither load a persistent-cache entry (jax warns on every
    # repeat) nor run what it compiles: nothing to keep.
    jax.config.update("jax_enable_compilation_cache", False)
    topology = aot_compile.resolve_topology(args.topology)
    if args.search:
        return _search(args, overrides, topology)
    config = load_config(args.config, overrides)
    report = aot_compile.compile_step(
        config, topology, args.num_slices, hlo_out=args.hlo_out,
        progress=lambda line: print(f"compile: {line}", file=sys.stderr, flush=True))
    print(aot_compile.format_report(report))
    print(json.dumps({k: v for k, v in report.items() if k != "details"}), flush=True)
    if not report["fits"]:
        short = report["hbm_per_chip_gb"] - report["hbm_capacity_gb"]
        unit = "GPU" if topology.platform == "gpu" else "chip"
        raise aot_compile.DoesNotFit(
            f"{aot_compile.config_name(config)} needs {report['hbm_per_chip_gb']:.2f} GiB per "
            f"{unit}, {short:.2f} GiB more than the {report['hbm_capacity_gb']:.0f} GiB of one "
            f"{topology.generation} {unit}; {memory_levers(config.grad_accum_steps)}")
    return 0


def _search(args, overrides: list[str], topology) -> int:
    check_positive("--workers", args.workers)
    headroom = aot_compile.HEADROOM[topology.platform]
    print(f"searching {topology.name} x{args.num_slices} ({args.workers} compiles at once; "
          f"results cached in {search.cache_dir()})", flush=True)
    rows = search.search(args.config, overrides, topology.name, args.num_slices,
                         workers=args.workers, headroom=headroom,
                         log=lambda line: print(line, flush=True))
    print(search.format_table(rows))
    best = search.recommend(rows, headroom)
    if best is None:
        raise aot_compile.DoesNotFit(f"nothing tried fits {topology.name} with {headroom:.0%} "
                                     "of HBM to spare; try a larger slice or a smaller "
                                     "per-chip batch")
    suggested = " ".join(f"--config.{o}" for o in search._case_overrides(
        search.MESHES[best["mesh"]], {k: best[k] for k in ("remat_policy",
                                                           "grad_accum_steps")}))
    print(f"recommended: {best['mesh']}, remat {best['remat_policy']}, grad_accum_steps "
          f"{best['grad_accum_steps']}: {suggested}")
    print(json.dumps({"recommended": {k: v for k, v in best.items()}}), flush=True)
    return 0
