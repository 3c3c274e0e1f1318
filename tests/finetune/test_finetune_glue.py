"""GLUE end to end on tfds mock data (one tiny epoch per task), and the offline error."""

from __future__ import annotations

import json
import os
import time

import pytest
import tensorflow_datasets as tfds

from bert_jax.finetune import job, tasks

from helpers.finetune import EXPECTED, micro_config, shared_compilation_cache


@pytest.fixture(scope="module", autouse=True)
def compile_once(tmp_path_factory):
    with shared_compilation_cache(str(tmp_path_factory.getbasetemp() / "finetune_jax_cache")):
        yield


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_glue_task_end_to_end_on_mock_data(name, tmp_path):
    split, metric_names, submissions = EXPECTED[name]
    workdir = str(tmp_path / name)
    with tfds.testing.mock_data(num_examples=12):
        results = job.finetune(micro_config(name), workdir)
    assert metric_names <= set(results[split])
    if name == "mnli":
        assert set(results["validation_mismatched"]) == {"accuracy"}
    with open(os.path.join(workdir, "eval_results.json")) as f:
        assert json.load(f)[split] == results[split]
    for file_name in submissions:
        with open(os.path.join(workdir, "glue_submission", file_name)) as f:
            lines = f.read().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == 13
        value = lines[1].split("\t")[1]
        if name == "stsb":
            assert 0.0 <= float(value) <= 5.0
        elif name in ("mnli", "ax", "qnli", "rte"):
            assert value in ("entailment", "neutral", "contradiction", "not_entailment")
        else:
            assert value in ("0", "1")


def test_glue_offline_without_data_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    task = tasks.get_task(micro_config("sst2", f"tfds_data_dir={tmp_path}"))
    start = time.time()
    with pytest.raises(ValueError, match="must be downloaded or prepared"):
        task.load("train")
    assert time.time() - start < 10
