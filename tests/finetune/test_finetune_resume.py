"""Fine-tuning resumes: a run killed (SIGKILL) mid-epoch after a checkpoint and rerun with
the same command continues from that checkpoint with the data order and dropout of an
uninterrupted run, and ends with bit-identical parameters and metrics (here in a
multi-seed run killed during its second seed)."""

import json
import os
import signal
import subprocess
import time

import jax
import numpy as np
import pytest

from bert_jax.weights import pretrained

from helpers.processes import environment, finetune_command

# 64 examples in batches of 8: 8 steps per epoch, 16 in all; a checkpoint every 3 steps
# and at each epoch's end.
SETTINGS = ("--config.num_train_epochs=2", "--config.checkpoint_every_steps=3",
            "--config.log_every_steps=1", "--config.seeds=1,2")


def run_results(workdir):
    """eval_results.json without the timings, and each seed's best parameters."""
    with open(os.path.join(workdir, "eval_results.json")) as f:
        results = json.load(f)
    timing = ("train_seconds", "first_step_seconds", "train_examples_per_second")
    for run in results["runs"].values():
        for key in timing:
            run.pop(key)
    params = {seed: pretrained.load(os.path.join(workdir, f"seed_{seed}", "best")).params
              for seed in (1, 2)}
    return results, params


def logged_steps(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [r["step"] for r in map(json.loads, f) if "train/loss" in r]


@pytest.mark.long
def test_a_finetune_killed_mid_epoch_resumes_bit_identically(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    run = subprocess.run(finetune_command(straight, *SETTINGS), env=environment(),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]

    process = subprocess.Popen(finetune_command(killed, *SETTINGS), env=environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Mid-way through epoch 2: the resumed run skips a whole epoch and part of one, and
    # takes over the model kept at epoch 1.
    checkpoint = killed / "seed_2" / "checkpoints" / "12"
    deadline = time.time() + 600
    while not checkpoint.is_dir() and time.time() < deadline:
        assert process.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "seed_2" / "eval_results.json").exists()

    rerun = subprocess.run(finetune_command(killed, *SETTINGS), env=environment(),
                           capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resumed from step " in rerun.stderr, rerun.stderr[-3000:]
    assert logged_steps(killed / "seed_2") == list(range(1, 17))  # each step logged once
    assert not (killed / "seed_2" / "checkpoints").exists()  # removed once complete
    (results, params), (expected, expected_params) = run_results(killed), run_results(straight)
    assert results == expected
    jax.tree.map(np.testing.assert_array_equal, params, expected_params)
