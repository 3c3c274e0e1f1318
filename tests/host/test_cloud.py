"""Runs whose data and workdir lie in a bucket, on a real GCS emulator (fake-gcs-server on
loopback, see tests/helpers/gcs_server.py): the same commands with gs:// paths give the
same losses as with local paths, later commands read the bucket's run, and nothing of it
is written to local disk."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import REPO
from helpers.gcs_server import upload_corpus
from helpers.pretrain import losses
from helpers.processes import command, environment

# What libraries keep in HOME whatever the run: matplotlib's font cache, Keras's config.
LIBRARY_FILES = (".cache/", ".keras/")


def local_files(directory) -> list[str]:
    """The files under `directory` (a run's HOME, TMPDIR and cwd) but LIBRARY_FILES."""
    found = (os.path.relpath(os.path.join(root, name), directory)
             for root, _, names in os.walk(directory) for name in names)
    return sorted(f for f in found if not f.startswith(LIBRARY_FILES))


@pytest.fixture(scope="module")
def bucket_run(tmp_path_factory, text_corpus, gcs):
    """A tiny pretraining run with its text corpus and workdir in the bucket, started in an
    empty directory that is also its HOME and TMPDIR (the compile cache and the data
    cache stay in $BERT_JAX_CACHE_DIR). Returns (bucket prefix, scratch dir, environment)."""
    scratch = tmp_path_factory.mktemp("scratch")
    prefix = scratch.name
    corpus = upload_corpus(gcs, text_corpus, f"{prefix}/corpus")
    env = gcs.environment(environment())
    env.update(HOME=str(scratch), TMPDIR=str(scratch), PYTHONPATH=REPO,
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("XDG_CACHE_HOME", None)
    run = subprocess.run(command(gcs.uri(prefix, "run"), corpus, steps=4), env=env,
                         cwd=scratch, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return prefix, scratch, env


@pytest.mark.long
def test_pretraining_in_a_bucket_matches_local_paths(tmp_path, text_corpus, gcs, bucket_run):
    """The text is converted into TFRecords in the bucket, streamed back, and every
    step's loss equals the local run's; checkpoints, metrics, TensorBoard events and the
    model files are in the bucket, and nothing is on local disk."""
    prefix, scratch, _ = bucket_run
    local = tmp_path / "local"
    run = subprocess.run(command(local, text_corpus, steps=4), env=environment(),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    local_losses = losses((local / "metrics.jsonl").read_text())
    assert sorted(local_losses) == [1, 2, 3, 4]
    assert losses(gcs.download(f"{prefix}/run/metrics.jsonl").decode()) == local_losses
    names = gcs.objects(f"{prefix}/run/")
    for expected in ("run/checkpoints/2/", "run/checkpoints/4/", "run/model/bert_jax.json",
                     "run/model/vocab.txt", "run/data/options.json",
                     "run/tensorboard/train/events.out.tfevents."):
        assert any(n.startswith(f"{prefix}/{expected}") for n in names), expected
    assert not any("/.tmp-" in n for n in names)
    assert local_files(scratch) == []


@pytest.mark.slow
def test_finetune_and_embed_read_the_bucket_run_and_write_to_the_bucket(gcs, bucket_run):
    prefix, scratch, env = bucket_run
    run_dir, ft_dir = gcs.uri(prefix, "run"), gcs.uri(prefix, "ft")
    finetune = subprocess.run(
        [sys.executable, "-m", "bert_jax.cli", "finetune",
         "--config", os.path.join(REPO, "configs", "finetune.py") + ":spam",
         "--init_from", run_dir, "--workdir", ft_dir, "--config.max_seq_length=32",
         "--config.global_batch_size=8", "--config.max_train_examples=32",
         "--config.max_eval_examples=16", "--config.eval_batch_size=16",
         "--config.num_train_epochs=1", "--config.log_every_steps=2"],
        env=env, cwd=scratch, capture_output=True, text=True)
    assert finetune.returncode == 0, finetune.stderr[-3000:]
    names = gcs.objects(f"{prefix}/ft/")
    for expected in ("ft/best/bert_jax.json", "ft/best/params/", "ft/eval_results.json",
                     "ft/metrics.jsonl", "ft/predictions/test.jsonl"):
        assert any(n.startswith(f"{prefix}/{expected}") for n in names), expected
    assert json.loads(gcs.download(f"{prefix}/ft/eval_results.json"))["task"] == "spam"

    gcs.upload(f"{prefix}/texts.txt", "the first line\nand a second one\n".encode())
    embed = subprocess.run(
        [sys.executable, "-m", "bert_jax.cli", "embed", "--model", run_dir,
         "--input", gcs.uri(prefix, "texts.txt"), "--output", gcs.uri(prefix, "vectors.npy")],
        env=env, cwd=scratch, capture_output=True, text=True)
    assert embed.returncode == 0, embed.stderr[-3000:]
    vectors = np.load(io.BytesIO(gcs.download(f"{prefix}/vectors.npy")))
    assert vectors.shape == (2, 32) and np.isfinite(vectors).all()
    assert local_files(scratch) == []
