"""The GPU figures of docs/results.md ("One H200 GPU") in one run: run this on a machine
with a GPU. It runs each figure's bench in turn, echoing its output and keeping a log per
step under --out, and prints a table of the steps at the end (done, failed, skipped or
cut at the time limit). Each row of the results table names the step's command line
(`--list` prints them).

    python bench/gpu_figures.py --prepare     # once, where tensorflow is installed
    python bench/gpu_figures.py [--out runs/gpu_figures] [--max_seconds 900]

`--prepare` writes the FP8 run's data (runs/fp8_data.npz, from the embedded corpus);
copy it to the GPU machine if that one has no tensorflow (the benches need none). The
steps run from this checkout (on the path whether bert_jax is installed or not), most
valuable first. With `--max_seconds`, a step that would not finish in the time left
(by its estimate from an H200) is skipped, and a running step is cut when the time is
up. `--smoke` runs the same steps on small shapes (tiny model, few steps), to try them
on a CPU. Whether the fast paths' kernels are taken and right (cuDNN attention, FP8
GEMMs) is a test: `python -m pytest -m gpu tests`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP8_DATA = "runs/fp8_data.npz"  # relative to the repository, where every step runs


def plan(smoke: bool) -> list[tuple[str, int, list[str]]]:
    """(name, estimated seconds on an H200, command) in order of value. The estimates
    come from measured first-step times on an H200 (bert-base 28-47 s, bert-large
    48-79 s)."""
    base, large = ("tiny128", "tiny128") if smoke else ("base128", "large512")
    levers = lambda *variants: ["bench/bench_levers.py", "--variants",
                                ",".join(f"{case}-{s}" for case, s in variants)]
    tiny = ["--model", "tiny", "--batch", "8", "--steps", "50"] if smoke else []
    return [
        # The GELU on the whole step: jax.nn.gelu, exact_gelu, the tanh form. The
        # cuBLASLt flag is left out: compiled for an H200, every GEMM is cuBLASLt already.
        ("gelu_step", 150, levers((base, "jaxgelu"), (base, "fast"), (base, "tanh"))),
        # FP8 and bf16 loss curves over 300 steps of bert-base.
        ("fp8_convergence", 130, ["bench/bench_fp8_convergence.py", "--data", FP8_DATA,
                                  *tiny]),
        # bert-base seq 128 against torch.compile.
        ("base_torch", 90, levers((base, "torch_compile"))),
        # bert-large seq 512: fast, FP8, torch.compile side by side.
        ("large512", 230, levers((large, "fast"), (large, "fp8"), (large, "torch_compile"))),
    ]


def prepare() -> None:
    """The FP8 run's data, made once where tensorflow is installed."""
    if os.path.exists(os.path.join(REPO, FP8_DATA)):
        print(f"ready: {FP8_DATA} exists")
        return
    os.makedirs(os.path.join(REPO, "runs"), exist_ok=True)
    subprocess.run([sys.executable, "bench/bench_fp8_convergence.py", "--prepare", FP8_DATA],
                   check=True, cwd=REPO)
    print(f"ready: {FP8_DATA}")


def environment() -> dict:
    """The steps' environment: this checkout importable, output unbuffered."""
    python_path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"}


def missing_input(command: list[str]) -> str:
    """Why a step cannot start (a data file it reads is absent), or ''."""
    if FP8_DATA in command and not os.path.exists(os.path.join(REPO, FP8_DATA)):
        return f"no {FP8_DATA}: run `python bench/gpu_figures.py --prepare` first"
    return ""


def run_step(name: str, command: list[str], limit: float, out: str, env: dict) -> str:
    """Runs one step, echoing its output into out/NAME.log as well; its whole process
    group is killed at `limit` seconds (math.inf: never), silent or not. Returns its
    status."""
    with open(os.path.join(out, f"{name}.log"), "w") as log:
        child = subprocess.Popen([sys.executable, *command], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)
        cut = threading.Event()

        def kill():
            cut.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)

        timer = threading.Timer(limit, kill)
        if math.isfinite(limit):
            timer.start()
        try:
            for line in child.stdout:
                sys.stdout.write(line)
                log.write(line)
            child.wait()
        finally:
            timer.cancel()
    if cut.is_set():
        return "cut at the time limit"
    return "done" if child.returncode == 0 else f"failed (rc {child.returncode})"


def run_plan(steps, max_seconds: float, out: str) -> list[tuple[str, str, float]]:
    """Each step in turn within `max_seconds` in all: (name, status, seconds) rows."""
    os.makedirs(out, exist_ok=True)
    start, env, rows = time.monotonic(), environment(), []
    for name, estimate, command in steps:
        left = max_seconds - (time.monotonic() - start)
        why = missing_input(command) or (
            f"{left:.0f} s left, needs ~{estimate}" if estimate > left else "")
        if why:
            rows.append((name, f"skipped: {why}", 0.0))
            continue
        print(f"== {name}: python {' '.join(command)}", flush=True)
        began = time.monotonic()
        rows.append((name, run_step(name, command, left, out, env), time.monotonic() - began))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true",
                        help="make the FP8 run's data (needs tensorflow) and stop")
    parser.add_argument("--list", action="store_true", help="print the steps and stop")
    parser.add_argument("--max_seconds", type=float, default=math.inf,
                        help="time for all steps (default: no limit)")
    parser.add_argument("--out", default="runs/gpu_figures", help="one log per step")
    parser.add_argument("--smoke", action="store_true", help="small shapes, for a CPU")
    args = parser.parse_args()
    if args.prepare:
        return prepare()
    steps = plan(args.smoke)
    if args.list:
        for name, estimate, command in steps:
            print(f"{name:<18}{estimate:>5} s  python {' '.join(command)}")
        return
    rows = run_plan(steps, args.max_seconds, args.out)
    print(f"\n{'step':<18}{'seconds':>8}  status")
    for name, status, seconds in rows:
        print(f"{name:<18}{seconds:>8.0f}  {status}")


if __name__ == "__main__":
    main()
