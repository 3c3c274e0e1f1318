"""`bert-jax` in subprocesses: pretraining and fine-tuning command lines, their
environment, and a SIGTERM sent mid-run."""

import os
import re
import signal
import subprocess
import sys
import time

from bert_jax.weights import pretrained

from helpers import REPO
from helpers.finetune import MICRO_MODEL
from helpers.pretrain import SMALL_MODEL


def command(workdir, input_files, *extra, steps=6):
    return [sys.executable, "-m", "bert_jax.cli", "pretrain",
            "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
            "--workdir", str(workdir), f"--config.model={SMALL_MODEL}",
            f"--config.input_files={input_files}", "--config.max_seq_length=32",
            "--config.max_predictions_per_seq=5", "--config.global_batch_size=8",
            f"--config.num_train_steps={steps}", "--config.warmup_steps=1",
            "--config.log_every_steps=1", "--config.eval_every_steps=0",
            "--config.checkpoint_every_steps=2", "--config.eval_fraction=0.1", *extra]


def environment(devices=1):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               JAX_PLATFORMS="cpu")
    return env


def params(workdir):
    return pretrained.load_pretrained_from_workdir(str(workdir)).params


def finetune_command(workdir, *extra):
    return [sys.executable, "-m", "bert_jax.cli", "finetune",
            "--config", os.path.join(REPO, "configs", "finetune.py") + ":spam,tiny",
            "--workdir", str(workdir), f"--config.model={MICRO_MODEL}",
            "--config.max_seq_length=32", "--config.global_batch_size=8",
            "--config.max_train_examples=64", "--config.max_eval_examples=40",
            "--config.eval_batch_size=16", *extra]


MESSAGE = re.compile(r"preempted at step (\d+); checkpoint saved; rerun the same command to "
                     r"resume")


def sigterm_during_run(args, env) -> tuple[int, str]:
    """Starts `args`, sends SIGTERM once training is about to start, then again every 20 ms
    until the process ends (so further SIGTERMs land during the checkpoint's save).
    Returns (exit code, stderr)."""
    process = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "layers, H=" in line:  # printed before the first step
            break
    while process.poll() is None:
        process.send_signal(signal.SIGTERM)
        time.sleep(0.02)
    lines += process.stderr.readlines()
    return process.wait(), "".join(lines)


