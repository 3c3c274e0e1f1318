"""The one place that runs the accelerator figures: when a session is lent a GPU, run
this first. It measures, in one device call, the GPU figures still open (the most
valuable first), each step started only while its estimated time still fits the budget,
its output echoed and kept under --out as it runs, and a table of what ran at the end.
What it measures goes to docs/results.md ("One H200 GPU"): each figure a row with the
command that reproduces it (the step's command line below, `--list`) and the date.

Here, once (pip needs the package index, the FP8 data needs tensorflow):

    python bench/gpu_lease.py --prepare

On the GPU, through the device tool (carry `.whl` and `runs/fp8_data.npz`, timeout_s
600; a session gets 15 minutes of device time, the machine's start included):

    python3 bench/gpu_lease.py --budget 540 --out $OUT

`--list` prints the plan; `--smoke` runs the same plan on small shapes (tiny model,
few steps), to try it on a CPU. The device image has jax, flax, optax, orbax, torch
and transformers but not ml_collections or google-crc32c, which bert_jax imports:
`--prepare` downloads their wheels into .whl/, and the run installs them.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEELS = os.path.join(REPO, ".whl")
FP8_DATA = "runs/fp8_data.npz"  # relative to the repository, where every step runs
# What bert_jax imports that the device image lacks: module -> the wheel carried for it.
CARRIED = {"ml_collections": "ml_collections==1.1.0", "google_crc32c": "google-crc32c==1.9.0"}


def plan(smoke: bool) -> list[tuple[str, int, list[str]]]:
    """(name, estimated seconds on an H200, command) in order of value. The estimates
    come from measured first-step times on an H200 (bert-base 28-47 s, bert-large
    48-79 s)."""
    base, large = ("tiny128", "tiny128") if smoke else ("base128", "large512")
    levers = lambda *variants: ["bench/bench_levers.py", "--variants",
                                ",".join(f"{case}-{s}" for case, s in variants)]
    small = ["--small"] if smoke else []
    tiny = ["--model", "tiny", "--batch", "8", "--steps", "50"] if smoke else []
    return [
        # The GPU as XLA describes it (for bert_jax.aot.gpu_hosts); FP8 products, current
        # against delayed scaling; attention dropout inside cuDNN. (Packed rows through
        # cuDNN are measured: docs/results.md.)
        ("paths", 70, ["bench/check_gpu_paths.py", "--checks", "target,fp8,dropout", *small]),
        # The GELU on the whole step: jax.nn.gelu, exact_gelu, the tanh form. The
        # cuBLASLt flag is left out: compiled for an H200, every GEMM is cuBLASLt already.
        ("gelu_step", 150, levers((base, "jaxgelu"), (base, "fast"), (base, "tanh"))),
        # FP8 and bf16 loss curves over 300 steps of bert-base.
        ("fp8_convergence", 130, ["bench/bench_fp8_convergence.py", "--data", FP8_DATA,
                                  *tiny]),
        # The torch.compile ratio of bert-base seq 128 in this call.
        ("base_torch", 90, levers((base, "torch_compile"))),
        # bert-large seq 512: fast, FP8, torch.compile side by side.
        ("large512", 230, levers((large, "fast"), (large, "fp8"), (large, "torch_compile"))),
    ]


def prepare() -> None:
    os.makedirs(WHEELS, exist_ok=True)
    platforms = [f"--platform={p}" for p in (
        "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--python-version", "3.12", "--implementation",
                    "cp", *platforms, "-d", WHEELS, *CARRIED.values()], check=True)
    if not os.path.exists(os.path.join(REPO, FP8_DATA)):
        os.makedirs(os.path.join(REPO, "runs"), exist_ok=True)
        subprocess.run([sys.executable, "bench/bench_fp8_convergence.py", "--prepare",
                        FP8_DATA], check=True, cwd=REPO)
    print(f"ready: {len(os.listdir(WHEELS))} wheels in .whl, {FP8_DATA}; carry "
          '[".whl", "runs/fp8_data.npz"]')


def environment() -> dict:
    """The children's environment: the carried wheels installed into a folder on their
    path where this Python lacks those packages (the device image), the repository
    importable, output unbuffered."""
    paths = [REPO]
    missing = [name for name in CARRIED if importlib.util.find_spec(name) is None]
    wheels = glob.glob(os.path.join(WHEELS, "*.whl"))
    if missing and not wheels:
        sys.exit(f"gpu_lease: {', '.join(missing)} missing and no wheels in .whl: run "
                 "`python bench/gpu_lease.py --prepare` here and carry .whl")
    if missing:
        site = "/tmp/bert_jax_site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                        "--no-deps", "--no-compile", "--upgrade", "--target", site, *wheels],
                       check=True)
        paths.append(site)
    python_path = os.pathsep.join(filter(None, [*paths, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"}


def run_step(name: str, command: list[str], limit: float, out: str, env: dict) -> str:
    """Runs one step, echoing its output into out/NAME.log as well; its whole process
    group is killed at `limit` seconds, silent or not. Returns its status."""
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
        timer.start()
        try:
            for line in child.stdout:
                sys.stdout.write(line)
                log.write(line)
            child.wait()
        finally:
            timer.cancel()
    if cut.is_set():
        return "cut at the budget"
    return "done" if child.returncode == 0 else f"failed (rc {child.returncode})"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="wheels and FP8 data, here")
    parser.add_argument("--list", action="store_true", help="print the plan and stop")
    parser.add_argument("--budget", type=float, default=540, help="seconds for all steps")
    parser.add_argument("--out", default="runs/gpu_lease", help="one log per step")
    parser.add_argument("--smoke", action="store_true", help="small shapes, for a CPU")
    args = parser.parse_args()
    if args.prepare:
        return prepare()
    steps = plan(args.smoke)
    if args.list:
        for name, estimate, command in steps:
            print(f"{name:<18}{estimate:>5} s  python {' '.join(command)}")
        return
    os.makedirs(args.out, exist_ok=True)
    start = time.monotonic()
    env = environment()
    rows = []
    for name, estimate, command in steps:
        left = args.budget - (time.monotonic() - start)
        if estimate > left:
            rows.append((name, f"skipped: {left:.0f} s left, needs ~{estimate}", 0.0))
            continue
        print(f"== {name}: python {' '.join(command)}", flush=True)
        began = time.monotonic()
        status = run_step(name, command, left, args.out, env)
        rows.append((name, status, time.monotonic() - began))
    print(f"\n{'step':<18}{'seconds':>8}  status")
    for name, status, seconds in rows:
        print(f"{name:<18}{seconds:>8.0f}  {status}")


if __name__ == "__main__":
    main()
