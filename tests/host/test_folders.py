"""bert_jax.host.folders: each kind of folder is recognised by its marker and, for folders
written before the marker existed, by what it holds; each description names what a rerun
may replace. bert_jax.data.data_record: the record of what data was made with, and the
records of earlier releases (options.json of format 1, summary.json's record_setup, a
part's plan) read as the new one."""

import json
import os
import shutil

import pytest

from bert_jax.data import data_record
from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError
from bert_jax.host import folders
from bert_jax.host.folders import (
    DATA_FOLDER,
    FINETUNING_WORKDIR,
    MODEL_DIRECTORY,
    PRETRAINING_WORKDIR,
    TRAINING_WORKDIR,
)

RELEASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "fixtures", "release_0.1.0")
FINGERPRINT = "ab" * 32


def make(folder, *names, meta=None):
    """`folder` holding the files (or, ending in /, folders) `names`; `meta`: the saved
    run config of a checkpoint of step 2 (an interrupted run's)."""
    os.makedirs(folder, exist_ok=True)
    for name in names:
        path = os.path.join(folder, name)
        if name.endswith("/"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write("{}")
    if meta is not None:
        os.makedirs(os.path.join(folder, TRAINING_WORKDIR.checkpoints, "2", "meta"))
        with open(os.path.join(folder, TRAINING_WORKDIR.checkpoints, "2", "meta",
                               "metadata"), "w") as f:
            json.dump({"config": meta}, f)
    return str(folder)


@pytest.mark.parametrize("names, meta, kind", [
    ((PRETRAINING_WORKDIR.model + "/",), None, folders.PRETRAINING),
    ((), {"model": {}}, folders.PRETRAINING),  # interrupted before model/: no task
    ((), {"task": "sst2"}, folders.FINETUNING),
    ((FINETUNING_WORKDIR.results,), None, folders.FINETUNING),
    ((FINETUNING_WORKDIR.best + "/",), None, folders.FINETUNING),
    ((FINETUNING_WORKDIR.predictions + "/",), None, folders.FINETUNING),
    ((FINETUNING_WORKDIR.seed_dir(3) + "/",), None, folders.FINETUNING),
    ((MODEL_DIRECTORY.config,), None, folders.MODEL),
    ((DATA_FOLDER.summary, DATA_FOLDER.shard(0, 1)), None, folders.DATA),
    ((DATA_FOLDER.record, DATA_FOLDER.shard(0, 1), DATA_FOLDER.summary), None, folders.DATA),
    ((DATA_FOLDER.shard(0, 1),), None, None),  # TFRecords alone: anyone's
    (("notes.txt",), None, None),
])
def test_a_folder_without_the_marker_is_known_by_what_it_holds(tmp_path, names, meta, kind):
    assert folders.kind_of(make(tmp_path / "f", *names, meta=meta)) == kind


def test_the_marker_says_the_kind_and_a_damaged_one_says_nothing(tmp_path):
    folder = make(tmp_path / "f", FINETUNING_WORKDIR.results)
    assert folders.mark(folder, folders.DISTILLATION, "bert-jax distill") == \
        {FINETUNING_WORKDIR.results}
    assert folders.kind_of(folder) == folders.DISTILLATION
    assert folders.mark(folder, folders.FINETUNING, "bert-jax finetune") is None  # kept
    open(os.path.join(folder, folders.JOB_FILE), "w").write("{not json")
    assert folders.kind_of(folder) is None
    assert folders.kind_of(str(tmp_path / "absent")) is None


def test_release_0_1_folders_are_recognised():
    assert folders.kind_of(os.path.join(RELEASE, "pretrain")) == folders.PRETRAINING
    assert folders.kind_of(os.path.join(RELEASE, "finetune")) == folders.FINETUNING
    assert folders.kind_of(os.path.join(RELEASE, "finetune", FINETUNING_WORKDIR.best)) == \
        folders.MODEL
    assert TRAINING_WORKDIR.checkpoint_steps(os.path.join(RELEASE, "pretrain")) == [2, 4]


def test_a_job_may_not_write_into_another_kind_of_folder(tmp_path):
    model = make(tmp_path / "model", MODEL_DIRECTORY.config)
    folders.check_kind(model, folders.MODEL)
    with pytest.raises(UserError, match="holds a model run .bert-jax convert/export."):
        folders.check_kind(model, folders.PRETRAINING)
    old = make(tmp_path / "old", FINETUNING_WORKDIR.results)  # before the marker
    folders.check_kind(old, folders.DISTILLATION)  # its results cannot tell them apart


def test_each_description_names_what_a_rerun_replaces():
    assert FINETUNING_WORKDIR.earlier_run == ("checkpoints", "metrics.jsonl", "tensorboard")
    assert FINETUNING_WORKDIR.earlier_results == (
        "best", "eval_results.json", "evaluate_results.json", "predictions", "glue_submission")
    assert PRETRAINING_WORKDIR.replaced == ("model", "generator", "data")
    assert PRETRAINING_WORKDIR.checkpoints not in PRETRAINING_WORKDIR.replaced  # resumed
    for name in (DATA_FOLDER.shard(3, 8), "summary.json", "options.json", ".tmp-x-1"):
        assert DATA_FOLDER.is_replaced(name), name
    for name in ("corpus.txt", "pretrain-1.tfrecord", "parts"):
        assert not DATA_FOLDER.is_replaced(name), name


def test_set_aside_moves_an_earlier_runs_results_under_previous(tmp_path):
    workdir = make(tmp_path / "w", FINETUNING_WORKDIR.results, "best/bert_jax.json",
                   "predictions/", "notes.txt")
    aside = folders.set_aside(workdir, FINETUNING_WORKDIR.earlier_results)
    assert os.path.dirname(aside) == os.path.join(workdir, folders.PREVIOUS_DIR)
    assert sorted(os.listdir(aside)) == ["best", "eval_results.json"]  # empty folders stay
    assert sorted(os.listdir(workdir)) == ["notes.txt", "predictions", "previous"]
    assert folders.set_aside(workdir, FINETUNING_WORKDIR.earlier_results) is None


# --- the data record ---------------------------------------------------------------------

def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("One sentence.\nAnother one.\n")
    return str(path)


OPTIONS = DataOptions(max_seq_length=32, max_predictions_per_seq=5, dynamic_masking=True,
                      seed=0)


def test_a_record_is_written_once_and_read_back(tmp_path):
    record = data_record.make_record(OPTIONS, "vocab.txt", FINGERPRINT, [corpus_file(tmp_path)],
                                     8)
    assert record["dynamic_masking"] is True and record["vocabulary"] == FINGERPRINT
    assert record["tokenizer"] == os.path.abspath("vocab.txt") and record["num_shards"] == 8
    data_record.write_record(str(tmp_path), record)
    assert data_record.read_record(str(tmp_path)) == (record, DATA_FOLDER.record)
    moved = dict(record, tokenizer="/elsewhere/vocab.txt")  # the same vocabulary
    assert data_record.record_key(moved) == data_record.record_key(record)
    assert data_record.read_record(str(tmp_path / "none")) is None


def test_release_0_1_options_json_reads_as_the_same_data(tmp_path):
    """A format-1 options.json (static_masking; keys at their defaults left out), as 0.1.0
    wrote it for converted text, names the data the same run would make now: reused."""
    folder = tmp_path / "data"
    shutil.copytree(os.path.join(RELEASE, "pretrain", "data"), folder)
    old = json.loads((folder / DATA_FOLDER.record).read_text())
    assert old["format"] == 1 and old["static_masking"] is False
    text = corpus_file(tmp_path)
    old["inputs"] = [data_record.input_identity(text)]
    (folder / DATA_FOLDER.record).write_text(json.dumps(old))
    record, source = data_record.read_record(str(folder))
    assert source == DATA_FOLDER.record and record["dynamic_masking"] is True
    assert record["masked_lm_prob"] == 0.15 and record["knowledge_masking"] == "none"
    made_now = data_record.make_record(OPTIONS, "vocab", old["vocabulary"], [text], 8)
    assert data_record.record_key(record) == data_record.record_key(made_now)


def old_summary(**extra):
    """create-data's summary.json before the record: counts, options, vocabulary."""
    return {"instances": 10, "options": DataOptions().create_data_fields(),
            "vocab": "/v/vocab.txt", "vocab_fingerprint": FINGERPRINT, **extra}


def test_an_old_summary_reads_as_the_record_under_its_new_names(tmp_path):
    setup = {"max_seq_length": 128, "next_sentence_prediction": True,
             "sentence_order_prediction": False, "static_masks": True,
             "max_predictions_per_seq": 20, "masked_lm_prob": 0.15, "whole_word_masking": True,
             "knowledge_masking": "none", "knowledge_masking_prob": 1.0}
    (tmp_path / DATA_FOLDER.summary).write_text(json.dumps(old_summary(record_setup=setup)))
    record, source = data_record.read_record(str(tmp_path))
    assert source == DATA_FOLDER.summary and "static_masks" not in record
    assert record["dynamic_masking"] is False and record["whole_word_masking"] is True
    assert record["tokenizer"] == "/v/vocab.txt" and record["vocabulary"] == FINGERPRINT
    assert data_record.has_setup(record)
    static = DataOptions(whole_word_masking=True)
    assert data_record.setup_mismatch(static, record) is None
    assert data_record.setup_mismatch(DataOptions(), record) == ("whole_word_masking", True,
                                                                 False)
    part = {"plan": "k", "run": {k: v for k, v in old_summary(record_setup=setup).items()
                                 if k != "instances"}}
    assert data_record.record_of_part(part) == record


def test_a_summary_without_record_setup_has_no_setup_but_its_vocabulary(tmp_path):
    (tmp_path / DATA_FOLDER.summary).write_text(json.dumps(old_summary()))
    record, _ = data_record.read_record(str(tmp_path))
    assert record == {"tokenizer": "/v/vocab.txt", "vocabulary": FINGERPRINT}
    assert not data_record.has_setup(record)


def test_records_made_without_masks_refuse_a_run_with_static_masks(tmp_path):
    record = data_record.make_record(OPTIONS, "vocab.txt", FINGERPRINT, [], 1)
    assert data_record.setup_mismatch(OPTIONS, record) is None
    static = DataOptions(max_seq_length=32, max_predictions_per_seq=5)
    assert data_record.setup_mismatch(static, record) == ("dynamic_masking", True, False)
    assert data_record.setup_mismatch(DataOptions(max_seq_length=64, dynamic_masking=True),
                                      record) == ("max_seq_length", 32, 64)


@pytest.mark.parametrize("existed", [False, True])
def test_a_run_that_fails_before_a_result_leaves_no_workdir_it_made(tmp_path, monkeypatch,
                                                                    capsys, existed):
    """Cases: `pretrain` on an unprepared `tfds:` corpus into a new workdir (none is left) and
    into a folder that held a user's file (it holds only that file again)."""
    from bert_jax import cli

    from helpers import REPO
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "no_tfds"))
    workdir = tmp_path / "run"
    if existed:
        make(str(workdir), "notes.txt")
    code = cli.main(["pretrain", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
                     "--workdir", str(workdir),
                     "--config.input_files='tfds:wikipedia/20230601.en'"])
    assert code == 2 and "is not prepared" in capsys.readouterr().err
    assert sorted(os.listdir(workdir)) == ["notes.txt"] if existed else not workdir.exists()


def test_unmarking_an_idle_workdir_removes_only_the_empty_setup_it_added(tmp_path):
    """Cases: a run that added an empty metrics file and empty folders (all removed, with the
    marker) and one that added a file with content (everything kept)."""
    for wrote, kept in ((None, ["notes.txt"]),
                        ("model/vocab.txt", [folders.JOB_FILE, "checkpoints", "metrics.jsonl",
                                             "model", "notes.txt"])):
        workdir = str(tmp_path / f"run{bool(wrote)}")
        make(workdir, "notes.txt")
        before = folders.mark(workdir, folders.PRETRAINING, "bert-jax pretrain")
        os.makedirs(os.path.join(workdir, "checkpoints", "tmp"))
        open(os.path.join(workdir, "metrics.jsonl"), "w").close()
        os.makedirs(os.path.join(workdir, "model"))
        if wrote:
            open(os.path.join(workdir, wrote), "w").write("[PAD]\n")
        folders.unmark_if_idle(workdir, before, "bert_jax.lock")
        assert sorted(os.listdir(workdir)) == kept
