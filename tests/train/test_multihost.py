"""Real processes: two `jax.distributed` processes (gloo) pretrain and fine-tune like
one, and a run killed with SIGKILL right after a checkpoint resumes to exactly the
same parameters. Each test launches `bert-jax` subprocesses; all but the two-process
pretraining (the one multi-host check every run keeps) are marked slow."""

import json
import os
import re
import signal
import socket
import subprocess
import time

import jax
import numpy as np
import pytest

from bert_jax.weights import pretrained

from helpers import REPO
from helpers.processes import command, environment, finetune_command, params


@pytest.mark.slow
def test_sigkill_right_after_a_checkpoint_resumes_exactly(tmp_path, text_corpus):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(command(straight, text_corpus), env=environment(), check=True,
                   capture_output=True)
    process = subprocess.Popen(command(killed, text_corpus), env=environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    committed = killed / "checkpoints" / "2"
    deadline = time.time() + 300
    while not committed.is_dir() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert committed.is_dir() and not (killed / "checkpoints" / "6").exists()
    saved = {int(n) for n in os.listdir(killed / "checkpoints") if n.isdigit()}
    started = time.time()
    rerun = subprocess.run(command(killed, text_corpus), env=environment(), check=True,
                           capture_output=True, text=True)
    # It resumed from a checkpoint the killed run committed (2, or 4 if the kill came
    # late), and logged only the steps after it: a rerun from scratch would log step 1.
    resumed = int(re.search(r"resumed from step (\d+)", rerun.stderr).group(1))
    assert resumed in saved and resumed >= 2, (resumed, saved)
    with open(killed / "metrics.jsonl") as f:
        logged = [json.loads(line) for line in f]
    steps = [r["step"] for r in logged if "train/loss" in r and r["time"] > started]
    assert steps == list(range(resumed + 1, 7)), steps
    jax.tree.map(np.testing.assert_array_equal, params(killed), params(straight))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.long
def test_two_processes_match_one(tmp_path, text_corpus):
    port = free_port()
    two, reference = tmp_path / "two", tmp_path / "reference"
    processes = [subprocess.Popen(
        command(two, text_corpus, f"--coordinator_address=127.0.0.1:{port}",
                "--num_processes=2", f"--process_id={i}", steps=4),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for i in range(2)]
    outputs = [p.communicate(timeout=600)[0].decode() for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs[0][-3000:] + outputs[1][-3000:]
    # The reference: one process, 2 devices, each global batch = host 0's rows + host 1's.
    args = command(reference, text_corpus, steps=4)
    args[1:4] = [os.path.join(REPO, "tests", "helpers", "two_host_reference.py")]
    run = subprocess.run(args, env=environment(2), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5),
                 params(two), params(reference))


@pytest.mark.slow
def test_two_processes_finetune_like_one(tmp_path):
    """Every process batches the same data and places its own rows: the model, the
    metrics and the predictions equal a one-process run on as many devices."""
    port = free_port()
    two, reference = tmp_path / "two", tmp_path / "reference"
    processes = [subprocess.Popen(
        finetune_command(two, f"--coordinator_address=127.0.0.1:{port}",
                         "--num_processes=2", f"--process_id={i}"),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for i in range(2)]
    outputs = [p.communicate(timeout=600)[0].decode() for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs[0][-3000:] + outputs[1][-3000:]
    run = subprocess.run(finetune_command(reference), env=environment(2), capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    results = [json.loads((d / "eval_results.json").read_text()) for d in (two, reference)]
    for split in ("validation", "test"):
        assert results[0][split] == pytest.approx(results[1][split], abs=1e-6)
    predictions = [(d / "predictions" / "test.jsonl").read_text() for d in (two, reference)]
    assert [json.loads(x)["label"] for x in predictions[0].splitlines()] == \
        [json.loads(x)["label"] for x in predictions[1].splitlines()]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5),
                 pretrained.load(two / "best").params, pretrained.load(reference / "best").params)


def two_processes(workdir, input_files, env, steps=4):
    """Starts the two processes of one run; returns them (stdout and stderr merged)."""
    port = free_port()
    return [subprocess.Popen(
        command(workdir, input_files, f"--coordinator_address=127.0.0.1:{port}",
                "--num_processes=2", f"--process_id={i}", steps=steps),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)]


@pytest.mark.slow
def test_two_processes_with_the_workdir_in_a_bucket_match_one_local(tmp_path, text_corpus, gcs):
    """Process 0 converts the text into the bucket; both read it and save their parts of
    each checkpoint there; the losses are a one-process local run's."""
    from helpers.pretrain import losses
    workdir = gcs.uri(tmp_path.name, "two")
    processes = two_processes(workdir, text_corpus, gcs.environment(environment()))
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs[0][-3000:] + outputs[1][-3000:]
    reference = tmp_path / "reference"
    args = command(reference, text_corpus, steps=4)
    args[1:4] = [os.path.join(REPO, "tests", "helpers", "two_host_reference.py")]
    run = subprocess.run(args, env=environment(2), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    two = losses(gcs.download(f"{tmp_path.name}/two/metrics.jsonl").decode())
    one = losses((reference / "metrics.jsonl").read_text())
    assert sorted(two) == [1, 2, 3, 4] and two == pytest.approx(one, abs=1e-5)


@pytest.mark.slow
def test_sigterm_to_one_of_two_processes_stops_both_at_one_step(tmp_path, text_corpus):
    """jax's preemption service spreads a SIGTERM on process 1 to process 0; both save the
    same step and exit 0, and the rerun ends where an uninterrupted run does."""
    from helpers.processes import MESSAGE
    straight, preempted = tmp_path / "straight", tmp_path / "preempted"
    for workdir in (straight, preempted):
        processes = two_processes(workdir, text_corpus, environment(), steps=8)
        if workdir == preempted:
            for line in processes[0].stdout:
                if "layers, H=" in line:  # process 0 is about to train
                    break
            processes[1].send_signal(signal.SIGTERM)
        outputs = [p.communicate(timeout=600)[0] for p in processes]
        assert all(p.returncode == 0 for p in processes), outputs[0][-3000:] + outputs[1][-3000:]
    match = MESSAGE.search(outputs[0])
    assert match, outputs[0][-3000:]
    step = int(match.group(1))
    assert 1 <= step < 8 and str(step) in os.listdir(preempted / "checkpoints")
    processes = two_processes(preempted, text_corpus, environment(), steps=8)
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs[0][-3000:]
    assert f"resumed from step {step} " in outputs[0]
    jax.tree.map(np.testing.assert_array_equal, params(preempted), params(straight))
