"""Preemption: SIGTERM checkpoints the next step and exits 0 with one line; the rerun
resumes exactly (the same losses and parameters as an uninterrupted run), with the
workdir on local disk or in a bucket (a real GCS emulator, see tests/helpers/gcs_server.py). SIGKILL
after a checkpoint in the bucket: the rerun resumes from it exactly. Fine-tuning stops
and resumes the same way."""

import re
import signal
import subprocess
import time

import jax
import numpy as np
import pytest

from helpers.gcs_server import upload_corpus
from helpers.pretrain import losses
from helpers.processes import MESSAGE, command, environment, params, sigterm_during_run

STEPS = 6


@pytest.fixture(scope="module")
def straight(tmp_path_factory, text_corpus):
    """An uninterrupted local run: (workdir, {step: loss})."""
    workdir = tmp_path_factory.mktemp("straight")
    run = subprocess.run(command(workdir, text_corpus, steps=STEPS), env=environment(),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return workdir, losses((workdir / "metrics.jsonl").read_text())


def check_preempted_then_resumed(args, env, read_metrics, straight_losses):
    code, stderr = sigterm_during_run(args, env)
    assert code == 0, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    match = MESSAGE.fullmatch(last)
    assert match, stderr[-3000:]
    step = int(match.group(1))
    assert 1 <= step < STEPS
    rerun = subprocess.run(args, env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resumed from step {step} " in rerun.stderr
    # Steps up to the preemption logged by the first run, the rest by the rerun: the
    # losses of an uninterrupted run.
    assert losses(read_metrics()) == straight_losses


@pytest.mark.long
def test_sigterm_checkpoints_exits_0_and_the_rerun_resumes_exactly(tmp_path, text_corpus,
                                                                   straight):
    workdir = tmp_path / "preempted"
    check_preempted_then_resumed(command(workdir, text_corpus, steps=STEPS), environment(),
                                 lambda: (workdir / "metrics.jsonl").read_text(), straight[1])
    jax.tree.map(np.testing.assert_array_equal, params(workdir), params(straight[0]))


@pytest.mark.slow
def test_sigterm_with_the_workdir_in_a_bucket_resumes_exactly(tmp_path, text_corpus, straight,
                                                              gcs):
    prefix = tmp_path.name
    corpus = upload_corpus(gcs, text_corpus, f"{prefix}/corpus")
    workdir = gcs.uri(prefix, "run")
    check_preempted_then_resumed(
        command(workdir, corpus, steps=STEPS), gcs.environment(environment()),
        lambda: gcs.download(f"{prefix}/run/metrics.jsonl").decode(), straight[1])


@pytest.mark.slow
def test_sigkill_with_the_workdir_in_a_bucket_resumes_exactly(tmp_path, text_corpus, straight,
                                                              gcs):
    prefix = tmp_path.name
    corpus = upload_corpus(gcs, text_corpus, f"{prefix}/corpus")
    args = command(gcs.uri(prefix, "run"), corpus, steps=STEPS)
    env = gcs.environment(environment())
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    # Orbax finalises a checkpoint in a bucket by writing commit_success.txt last.
    committed = f"{prefix}/run/checkpoints/2/commit_success.txt"
    deadline = time.time() + 300
    while committed not in gcs.objects(f"{prefix}/run/checkpoints/2/") and time.time() < deadline:
        assert process.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert f"{prefix}/run/checkpoints/{STEPS}/commit_success.txt" not in gcs.objects(prefix)
    rerun = subprocess.run(args, env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert re.search(r"resumed from step [24] ", rerun.stderr), rerun.stderr[-3000:]
    assert losses(gcs.download(f"{prefix}/run/metrics.jsonl").decode()) == straight[1]


@pytest.mark.slow
def test_sigterm_checkpoints_finetuning_exits_0_and_the_rerun_resumes(tmp_path):
    """Fine-tuning stops at the next step with a checkpoint, like pretraining; the rerun
    resumes from it (bit-identity: tests/finetune/test_finetune_resume.py)."""
    from helpers.processes import finetune_command
    args = finetune_command(tmp_path / "ft", "--config.log_every_steps=1")
    process = subprocess.Popen(args, env=environment(), stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, text=True)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "spam from" in line:  # the run has started
            process.send_signal(signal.SIGTERM)
            break
    lines += process.stderr.readlines()
    assert process.wait() == 0, "".join(lines)[-3000:]
    match = MESSAGE.fullmatch(lines[-1].strip())
    assert match, "".join(lines)[-3000:]
    step = int(match.group(1))
    assert (tmp_path / "ft" / "checkpoints" / str(step)).is_dir()
    rerun = subprocess.run(args, env=environment(), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resumed from step {step} " in rerun.stderr, rerun.stderr[-3000:]
