"""`bert-jax compile --search`: which mesh, remat policy and accumulation fit.

The search runs for a TPU slice or GPU hosts.

For the config's model, sequence length, global batch and topology, each mesh split
(data parallel, FSDP, FSDP with 2-way tensor parallelism) climbs a ladder of cheaper
memory until it fits with `compile.HEADROOM` to spare: the config's remat policy,
then full remat, then 2 and 4 micro-batches. Cases compile in parallel processes (each
a `bert-jax compile`; libtpu allows it with ALLOW_MULTIPLE_LIBTPU_LOAD) and each result
is cached as JSON under CACHE_ROOT/tpu_compile, keyed by the whole config, the slice
and the jax/libtpu/CUDA plugin versions, so a repeated search only compiles what
changed.
The recommendation: fits with the headroom, least communication, fewest micro-batches.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import threading

from bert_jax.aot import collectives
from bert_jax.host import compile_cache
from bert_jax.train.config_loader import load_config

MESHES = {"data": {"data": -1, "fsdp": 1, "tensor": 1},
          "fsdp": {"data": 1, "fsdp": -1, "tensor": 1},
          "fsdp+tensor2": {"data": 1, "fsdp": -1, "tensor": 2}}


def ladder(config) -> list[dict]:
    """The overrides tried in turn for one mesh, cheapest in recompute and steps first."""
    steps = [{"remat_policy": config.remat_policy, "grad_accum_steps": 1},
             {"remat_policy": "full", "grad_accum_steps": 1},
             {"remat_policy": "full", "grad_accum_steps": 2},
             {"remat_policy": "full", "grad_accum_steps": 4}]
    unique = []
    for step in steps:
        if step not in unique:
            unique.append(step)
    return unique


def _versions() -> str:
    found = []
    for package in ("jax", "jaxlib", "libtpu", "jax-cuda13-plugin", "nvidia-cudnn-cu13",
                    "bert_jax"):
        try:
            found.append(f"{package}={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package}=?")
    found.append(f"hlo_collectives={collectives.COUNTING_VERSION}")
    # A GPU's capacity is JAX's share of its memory (bert_jax.aot.gpu_hosts).
    found.append(f"mem_fraction={os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION', '')}")
    return ",".join(found)


def cache_dir() -> str:
    return os.path.join(compile_cache.cache_root(), "tpu_compile")


def _case_overrides(mesh: dict, step: dict) -> list[str]:
    return ([f"mesh_shape.{k}={v}" for k, v in mesh.items()]
            + [f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in step.items()])


def run_case(config_arg: str, overrides: list[str], topology: str, num_slices: int) -> dict:
    """One `bert-jax compile` in a subprocess, or its cached result.

    The result is the report, or {'fits': False, 'error': ...} when it was refused."""
    config = load_config(config_arg, overrides)
    key = hashlib.sha256(json.dumps([config.to_dict(), topology, num_slices, _versions()],
                                    sort_keys=True, default=str).encode()).hexdigest()[:20]
    path = os.path.join(cache_dir(), f"{key}.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    result = subprocess.run(
        [sys.executable, "-m", "bert_jax.cli", "compile", "--config", config_arg,
         "--topology", topology, "--num_slices", str(num_slices),
         *[f"--config.{o}" for o in overrides]], capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    if result.returncode in (0, 2) and lines and lines[-1].startswith("{"):
        report = json.loads(lines[-1])
    elif result.returncode == 2:
        report = {"fits": False, "error": result.stderr.strip().splitlines()[-1]}
    else:
        raise RuntimeError(f"compiling {overrides} failed: {result.stderr.strip()[-500:]}")
    os.makedirs(cache_dir(), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(report, f)
    os.replace(path + ".tmp", path)
    return report


def search(config_arg: str, overrides: list[str], topology: str, num_slices: int = 1,
           workers: int = 2, headroom: float = 0.10, log=print) -> list[dict]:
    """Every case tried: {'mesh', 'remat_policy', 'grad_accum_steps', 'report'}.

    Each mesh stops at its first case that fits with `headroom`."""
    config = load_config(config_arg, overrides)
    lock, rows = threading.Lock(), []

    def climb(name: str, mesh: dict):
        for step in ladder(config):
            report = run_case(config_arg, overrides + _case_overrides(mesh, step), topology,
                              num_slices)
            row = {"mesh": name, **step, "report": report}
            with lock:
                rows.append(row)
                log(f"  {name:<13} remat {step['remat_policy']:<24} accum "
                    f"{step['grad_accum_steps']}: " + _summary(report))
            if _fits(report, headroom) or "error" in report and "alone" in report["error"]:
                return  # fits, or its state alone overflows: cheaper steps will not help

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(climb, n, m) for n, m in MESHES.items()]:
            future.result()
    return rows


def _fits(report: dict, headroom: float) -> bool:
    return bool(report.get("fits")) and \
        report["hbm_per_chip_gb"] <= (1 - headroom) * report["hbm_capacity_gb"]


def _comm(report: dict) -> int:
    return sum(report.get("collective_bytes", {}).values())


def _summary(report: dict) -> str:
    if "error" in report:
        return "does not fit: " + report["error"].split(": error: ")[-1][:120]
    return (f"{report['hbm_per_chip_gb']:.2f}/{report['hbm_capacity_gb']:.0f} GiB, "
            f"comm {_comm(report) / 1e6:,.1f} MB/chip/step, compiled in {report['compile_s']}s")


def recommend(rows: list[dict], headroom: float = 0.10) -> dict | None:
    """The case that fits with `headroom`, with the least communication; None when none does.

    Ties go to the fewest micro-batches."""
    fitting = [r for r in rows if _fits(r["report"], headroom)]
    return min(fitting, key=lambda r: (_comm(r["report"]), r["grad_accum_steps"]),
               default=None)


def format_table(rows: list[dict]) -> str:
    head = (f"{'mesh':<13} {'remat':<24} {'accum':>5} {'HBM/chip GiB':>12} {'fits':>5} "
            f"{'comm MB/chip/step':>17}")
    lines = [head]
    for r in sorted(rows, key=lambda r: (r["mesh"], r["grad_accum_steps"])):
        rep = r["report"]
        hbm = f"{rep['hbm_per_chip_gb']:.2f}" if "hbm_per_chip_gb" in rep else "-"
        lines.append(f"{r['mesh']:<13} {r['remat_policy']:<24} {r['grad_accum_steps']:>5} "
                     f"{hbm:>12} {'yes' if rep.get('fits') else 'no':>5} "
                     f"{_comm(rep) / 1e6:>17,.1f}")
    return "\n".join(lines)
