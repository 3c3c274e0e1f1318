"""GLUE from `glue_data/` folders (`--config.glue_dir`): small files written in each task's
published layout (download_glue_data.py's, as google-research/bert reads them), read to the
same examples as tensorflow-datasets' own GLUE reader, end to end with metrics and
submission files, and the one-line errors."""

from __future__ import annotations

import os

import pytest
import tensorflow_datasets as tfds

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.finetune import job, tasks
from bert_jax.finetune.tasks import glue_files

from helpers.finetune import (
    CONFIG,
    EXPECTED,
    MICRO_MODEL,
    SHARED_DATA,
    micro_config,
    shared_compilation_cache,
)
from helpers.glue import PAIRS, PUBLISHED

NAMES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "qqp": "QQP", "stsb": "STS-B",
         "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI", "ax": "MNLI"}


@pytest.fixture(scope="module")
def glue_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue") / "glue_data"
    for folder, contents in PUBLISHED.items():
        (root / folder).mkdir(parents=True)
        for name, text in contents.items():
            (root / folder / name).write_text(text, encoding="utf-8")
    return str(root)


def _task(name, glue_dir):
    return tasks.get_task(micro_config(name, f"glue_dir={glue_dir}"))


def _tfds_examples(name, path, split):
    """tensorflow-datasets' own GLUE reader on the same file (its label feature encodes a
    label name as its index)."""
    builder = tfds.builder(f"glue/{name}")
    key_a, key_b = GLUE_KEYS[name]
    encode = builder.info.features["label"]
    return [{"text_a": ex[key_a], "text_b": ex.get(key_b), "idx": ex["idx"],
             "label": None if split == "test" else encode.encode_example(ex["label"])}
            for _, ex in builder._generate_examples(data_file=path, split=split)]


GLUE_KEYS = {"cola": ("sentence", None), "sst2": ("sentence", None),
             "qqp": ("question1", "question2"), "stsb": ("sentence1", "sentence2"),
             "mnli": ("premise", "hypothesis"), "qnli": ("question", "sentence"),
             "rte": ("sentence1", "sentence2"), "wnli": ("sentence1", "sentence2")}


@pytest.mark.parametrize("name", sorted(GLUE_KEYS))
def test_each_task_reads_the_examples_tfds_reads(name, glue_data):
    task = _task(name, glue_data)
    splits = ["train", *task.eval_splits, *task.test_splits]
    for split in splits:
        path = glue_files.split_path(glue_data, name, split)
        tfds_split = "test" if split.startswith("test") else \
            "dev" if split.startswith("validation") else split
        ours = task.load(split)
        assert ours == _tfds_examples(name, path, tfds_split), (name, split)
        assert len(ours) in (3, 4, 5, 6)
    assert len(splits) == (5 if name == "mnli" else 3)


def test_mrpc_reads_the_bom_header_and_ax_the_diagnostic_set(glue_data):
    mrpc = _task("mrpc", glue_data)
    train = mrpc.load("train")
    assert [ex["label"] for ex in train] == [1, 0, 1, 0, 1, 0]
    assert train[0] == {"text_a": PAIRS[0][0], "text_b": PAIRS[0][1], "label": 1, "idx": 0}
    assert [ex["idx"] for ex in mrpc.load("test")] == list(range(5))
    ax = _task("ax", glue_data)
    assert ax.test_splits == ("test",)
    assert [ex["text_b"] for ex in ax.load("test")] == [b for _, b in PAIRS[:3]]
    assert ax.load("train")[2]["label"] == 2  # MNLI's contradiction


def test_the_task_folder_alone_works_and_a_missing_test_file_is_skipped(glue_data, tmp_path):
    folder = tmp_path / "RTE"
    folder.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_text(PUBLISHED["RTE"][name], encoding="utf-8")
    task = _task("rte", str(folder))
    assert task.load("validation") == _task("rte", glue_data).load("validation")
    assert task.test_splits == ()


def _error(name, glue_dir, split="train"):
    with pytest.raises(UserError) as info:
        _task(name, glue_dir).load(split)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_one_line_errors(glue_data, tmp_path):
    assert "neither a glue_data folder (no MRPC/ in it) nor MRPC's own folder" in _error(
        "mrpc", str(tmp_path))
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text(PUBLISHED["SST-2"]["train.tsv"])
    assert f"{tmp_path}/SST-2/dev.tsv not found: GLUE SST-2's validation split" in _error(
        "sst2", str(tmp_path), "validation")
    message = _error("mrpc", os.path.join(glue_data, "SST-2"))
    assert "SST-2/train.tsv is not a GLUE MRPC labeled file: it lacks the column(s) " \
           "#1 String, #2 String, Quality" in message and "it looks like SST-2's" in message
    assert "SST-2/train.tsv:1: not a GLUE CoLA train file, whose lines have no header" in _error(
        "cola", os.path.join(glue_data, "SST-2"))
    assert "it looks like RTE's" in _error("mnli", os.path.join(glue_data, "RTE"))
    bad = tmp_path / "WNLI"
    bad.mkdir()
    (bad / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
    assert "WNLI/train.tsv:2: label 'entailment' is not one of 0, 1" in _error("wnli", str(bad))


@pytest.mark.long
@pytest.mark.parametrize("name", ["cola", "mrpc", "stsb", "mnli", "ax"])
def test_finetune_reads_a_glue_data_folder_end_to_end(name, glue_data, tmp_path):
    """The metrics and submission files of the tfds route (test_finetune_glue.EXPECTED)."""
    split, metric_names, submissions = EXPECTED[name]
    workdir = str(tmp_path / name)
    # Tasks of the same shapes (cola and mrpc, mnli and ax) compile their steps once.
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        results = job.finetune(micro_config(name, f"glue_dir={glue_data}"), workdir)
    assert metric_names <= set(results[split])
    if name == "mnli":
        assert set(results["validation_mismatched"]) == {"accuracy"}
    for file_name in submissions:
        with open(os.path.join(workdir, "glue_submission", file_name)) as f:
            lines = f.read().splitlines()
        rows = 3 if name == "ax" else 6 if name == "mnli" else 5
        assert lines[0] == "index\tprediction"
        assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(rows)]
        values = {line.split("\t")[1] for line in lines[1:]}
        if name == "stsb":
            assert all(0.0 <= float(v) <= 5.0 for v in values)
        else:
            assert values <= ({"0", "1"} if name in ("cola", "mrpc") else
                              {"entailment", "neutral", "contradiction"})


def test_the_cli_exits_2_in_one_line_for_a_wrong_folder(tmp_path, capsys):
    args = ["finetune", "--config", f"{CONFIG}:mrpc,tiny", "--workdir", str(tmp_path / "w"),
            f"--config.model={MICRO_MODEL}", f"--config.glue_dir={tmp_path}"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-jax finetune: error: --config.glue_dir ") and \
        err.count("\n") == 1, err


REAL = os.path.join(SHARED_DATA, "glue")


@pytest.mark.skipif(not os.path.isdir(REAL), reason=f"no real GLUE data at {REAL} (the "
                    "published MRPC and SST-2 folders; see ../shared/data/README.md)")
def test_the_real_published_mrpc_and_sst2_files():
    sizes = {("mrpc", "train"): 3668, ("mrpc", "validation"): 408, ("mrpc", "test"): 1725,
             ("sst2", "train"): 67349, ("sst2", "validation"): 872}
    for (name, split), size in sizes.items():
        examples = _task(name, REAL).load(split)
        assert len(examples) == size
    assert _task("sst2", REAL).test_splits == ()  # this copy has no SST-2 test.tsv
    dev = _task("mrpc", REAL).load("validation")
    assert sum(ex["label"] for ex in dev) == 279  # MRPC dev: 279 of 408 paraphrases
