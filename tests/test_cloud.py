"""Runs whose data and workdir lie in a bucket, on a real GCS emulator (fake-gcs-server on
loopback, see gcs_server.py): the same commands with gs:// paths give the same losses as
with local paths."""

import glob
import json
import os
import subprocess

import pytest

from gcs_server import gcs  # noqa: F401 (fixture)
from test_multihost import command, environment
from test_train import text_corpus  # noqa: F401 (fixture)


def upload_corpus(bucket, pattern, prefix):
    """The files of `pattern` into gs://BUCKET/PREFIX/; returns their gs:// pattern."""
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            bucket.upload(f"{prefix}/{os.path.basename(path)}", f.read())
    return bucket.uri(prefix, os.path.basename(pattern))


def pretrain(workdir, input_files, bucket, *extra, steps=4, check=True):
    run = subprocess.run(command(workdir, input_files, *extra, steps=steps),
                         env=bucket.environment(environment()), capture_output=True, text=True)
    if check:
        assert run.returncode == 0, run.stderr[-3000:]
    return run


def losses(metrics_jsonl: str) -> dict:
    """{step: train loss} of a metrics.jsonl's content."""
    records = [json.loads(line) for line in metrics_jsonl.splitlines()]
    return {r["step"]: r["train/loss"] for r in records if "train/loss" in r}


def test_pretraining_in_a_bucket_matches_local_paths(tmp_path, text_corpus, gcs):
    """Text corpus and workdir in the bucket: the text is converted into TFRecords in the
    bucket, streamed back, and every step's loss equals the local run's."""
    local = tmp_path / "local"
    pretrain(local, text_corpus, gcs)
    prefix = tmp_path.name
    remote_corpus = upload_corpus(gcs, text_corpus, f"{prefix}/corpus")
    workdir = gcs.uri(prefix, "run")
    pretrain(workdir, remote_corpus, gcs)

    names = gcs.objects(f"{prefix}/run/")
    local_losses = losses((local / "metrics.jsonl").read_text())
    assert losses(gcs.download(f"{prefix}/run/metrics.jsonl").decode()) == local_losses
    assert sorted(local_losses) == [1, 2, 3, 4]
    for expected in ("run/checkpoints/2/", "run/checkpoints/4/", "run/model/bert_jax.json",
                     "run/model/vocab.txt", "run/data/options.json",
                     "run/tensorboard/train/events.out.tfevents."):
        assert any(n.startswith(f"{prefix}/{expected}") for n in names), expected
    assert not any("/.tmp-" in n for n in names)
