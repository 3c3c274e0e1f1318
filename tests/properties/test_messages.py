"""Messages that name what they found (issue 58, item 5): one line saying what the
program found, where, and the next step, never a library's internals.

Cases, each with its exit code and line (folders are made by hand: no training):
- a folder given as a model that holds none: a fine-tune interrupted at step N (rerun
  it), one still running (wait), a pretraining workdir without its model files, data from
  create-data, an empty folder, an unknown one;
- a running fine-tune that has kept a model is read with a one-line note;
- a corrupt newest checkpoint: the warning names the step, the file and what the run did,
  the library's text goes to the log file only;
- `--help_config` shows the chosen variant's values;
- `compile` and `predict` over many rows say what they are doing (stderr);
- "1 host", not "1 hosts"; the GLUE tfds message whole, with the --config.glue_dir hint.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import types

import jax
import pytest

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.finetune import inference, tasks
from bert_jax.host import folders, library_log
from bert_jax.host.workdir_lock import LOCK_FILE
from bert_jax.models.config import BertConfig
from bert_jax.train import checkpoint
from bert_jax.train.sharding import Partitioner
from bert_jax.weights import pretrained

from helpers import REPO
from helpers.finetune import micro_config
from helpers.states import restore, state_on


def make_workdir(path, kind=None, steps=(), files=(), running=False):
    """A folder as a run leaves it: its kind marker, checkpoints/STEP/ folders, empty
    files, and with `running` a live lock (this test's own process)."""
    os.makedirs(path, exist_ok=True)
    if kind is not None:
        (path / folders.JOB_FILE).write_text(json.dumps({"kind": kind}))
    for step in steps:
        os.makedirs(path / "checkpoints" / str(step))
    for name in files:
        os.makedirs((path / name).parent, exist_ok=True)
        (path / name).write_text("")
    if running:
        (path / LOCK_FILE).write_text(json.dumps({
            "host": socket.gethostname(), "pid": os.getpid(),
            "command": "bert-jax finetune", "started": "2026-11-29T01:00:00Z"}))
    return str(path)


def run_cli(args, capsys):
    """(exit code, stderr lines) of one `bert-jax` command."""
    code = cli.main(args)
    return code, capsys.readouterr().err.strip().splitlines()


FOLDERS = {
    "interrupted fine-tune": (
        dict(kind=folders.FINETUNING, steps=(2, 4)),
        "{w} is a fine-tuning run interrupted at step 4, before it kept a model; rerun the "
        "same `bert-jax finetune --workdir {w}` command to finish it (it resumes from step 4)"),
    "fine-tune stopped before a checkpoint": (
        dict(kind=folders.FINETUNING, files=("metrics.jsonl",)),
        "{w} is a fine-tuning run interrupted before its first checkpoint, before it kept a "
        "model; rerun the same `bert-jax finetune --workdir {w}` command to finish it"),
    "running fine-tune": (
        dict(kind=folders.FINETUNING, steps=(2,), running=True),
        "{w} is a fine-tuning run still in progress (host " + socket.gethostname() +
        ", pid " + str(os.getpid()) + ", bert-jax finetune started 2026-11-29T01:00:00Z) "
        "that has no model to read yet; wait: it keeps a model at its first evaluation"),
    "pretraining workdir without its model files": (
        dict(kind=folders.PRETRAINING, steps=(10,)),
        "{w} is a pretraining workdir whose model files (model/bert_jax.json) are missing"),
    "pretraining stopped before a checkpoint": (
        dict(kind=folders.PRETRAINING, files=("model/bert_jax.json",)),
        "{w} is a pretraining run interrupted before its first checkpoint, before it kept a "
        "model; rerun the same `bert-jax pretrain --workdir {w}` command"),
    "create-data output": (
        dict(files=("summary.json", "pretrain-00000-of-00001.tfrecord")),
        "{w} holds pretraining data (bert-jax create-data), not a model; train on it with "
        "`bert-jax pretrain --config.input_files={w}/*.tfrecord`"),
    "empty folder": (dict(), "{w} is an empty folder, not a model"),
    "unknown folder": (dict(files=("notes.txt",)), "{w} is not a bert_jax model (a model "
                       "directory holds bert_jax.json, a pretraining workdir checkpoints/"),
}


@pytest.mark.parametrize("command", ["predict", "export"])
@pytest.mark.parametrize("case", list(FOLDERS))
def test_a_folder_without_a_model_is_named_with_the_next_step(case, command, tmp_path,
                                                             capsys):
    layout, expected = FOLDERS[case]
    workdir = make_workdir(tmp_path / "w", **layout)
    (tmp_path / "in.txt").write_text("a sentence\n")
    args = {"predict": ["predict", "--model", workdir, "--input", str(tmp_path / "in.txt"),
                        "--output", str(tmp_path / "out.jsonl")],
            "export": ["export", "--model", workdir, "--output", str(tmp_path / "exported")]}
    before = sorted(os.listdir(tmp_path))
    code, lines = run_cli(args[command], capsys)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(
        f"bert-jax {command}: error: " + expected.format(w=workdir)), lines
    assert sorted(os.listdir(tmp_path)) == before  # nothing written


def test_a_running_fine_tune_is_read_with_a_note(tmp_path, caplog):
    workdir = make_workdir(tmp_path / "w", kind=folders.FINETUNING, running=True)
    pretrained.write_model_files(os.path.join(workdir, "best"), BertConfig(
        vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16))
    os.makedirs(os.path.join(workdir, "best", "params"))
    with caplog.at_level(logging.WARNING, logger="bert_jax"):
        ref = pretrained.open_model(workdir)
    assert ref.directory == os.path.join(workdir, "best")
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and notes[0].startswith(
        f"{workdir} is still being trained (host {socket.gethostname()}, pid {os.getpid()}"), notes
    assert notes[0].endswith("answering from the model it has kept so far (best/), which may "
                             "still change; wait for the run to end for its final model")

    os.remove(os.path.join(workdir, LOCK_FILE))  # the run ended: no note
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bert_jax"):
        pretrained.open_model(workdir)
    assert caplog.records == []


def flip_array_bytes(step_dir):
    """Flips a byte every 64 in the array data of a saved state (its index intact)."""
    for root, _, names in os.walk(os.path.join(step_dir, "state")):
        for name in names if root.endswith("process_0" + os.sep + "d") else ():
            with open(os.path.join(root, name), "r+b") as f:
                data = bytearray(f.read())
                for i in range(100, len(data), 64):
                    data[i] ^= 0xFF
                f.seek(0)
                f.write(data)


def test_a_corrupt_checkpoint_is_named_by_step_and_array_with_the_full_text_filed(
        tmp_path, caplog):
    state, plan = state_on(jax.devices()[:2])
    with checkpoint.Checkpointer(str(tmp_path), keep=3) as ckpt:
        for step in (1, 2):
            ckpt.save(step, state.replace(step=state.step + step), {"pipeline": None})
        ckpt.wait()
    flip_array_bytes(tmp_path / "checkpoints" / "2")
    log_file = tmp_path / "library-errors.txt"

    def write(text):
        with open(log_file, "a") as f:
            f.write(text)
        return str(log_file)

    library_log.set_file(write)
    try:
        with caplog.at_level(logging.WARNING, logger="bert_jax"):
            _, _, step = restore(tmp_path, plan.abstract)
    finally:
        library_log.set_file(None)
    assert step == 1
    [warning] = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    aside = next((tmp_path / checkpoint.CORRUPT_DIR).iterdir())
    source = tmp_path / "checkpoints" / "2"
    assert warning.startswith(f"checkpoint of step 2 ({source}) is unreadable: array params.")
    assert warning.endswith(f"; moved it to {aside} and trying step 1; full text in {log_file}")
    assert "TensorStore" not in warning and "\n" not in warning
    assert "TensorStore" in log_file.read_text()  # the library's own text, kept


@pytest.mark.parametrize("argv", [
    ["--config", "configs/pretrain.py:tiny", "--help_config", "--config.learning_rate=0.5"],
    ["--help_config", "--config=configs/pretrain.py:tiny", "--config.learning_rate", "0.5"]])
def test_help_config_shows_the_chosen_variants_values(argv, capsys):
    argv = [a.replace("configs/", os.path.join(REPO, "configs") + "/") for a in argv]
    with pytest.raises(SystemExit) as e:
        cli.main(["pretrain", *argv])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "with the values of " in out.splitlines()[0]
    assert "  model (str | dict) = 'tiny' (default 'bert-base')" in out
    assert "  learning_rate (float) = 0.5 (default " in out
    assert "  max_seq_length (int) = 128;" in out  # the variant's value, equal to the default


def test_the_glue_tfds_message_is_whole_and_names_glue_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    task = tasks.get_task(micro_config("mrpc", f"tfds_data_dir={tmp_path}"))
    with pytest.raises(UserError) as e:
        task.load("train")
    assert str(e.value).endswith(
        "or point --config.tfds_data_dir at a prepared copy; or read GLUE's own files "
        "(download_glue_data.py) with --config.glue_dir=PATH/glue_data")  # no library text


def test_predict_over_many_rows_says_how_far_it_is(capsys, monkeypatch):
    """`predict` hands its model an `inference.Progress`; a line per batch here."""
    monkeypatch.setattr(inference.Progress, "EVERY_SECONDS", 0.0)
    config = micro_config("sst2")  # eval batches of 16
    partitioner = Partitioner.from_config(config)
    features = [{"input_ids": [2, 5, 3], "segment_ids": [0, 0, 0], "feature_index": i}
                for i in range(40)]
    eval_fn = jax.jit(lambda params, batch: {"first": batch["input_ids"][:, 1]})
    with jax.set_mesh(partitioner.mesh):
        outputs = inference.predict_features(types.SimpleNamespace(sequence_keys=()), None,
                                             features, eval_fn,
                                             inference.EvalBatching.of(config), partitioner,
                                             inference.Progress("predict"))
    assert [int(o["first"]) for o in outputs] == [5] * 40
    assert capsys.readouterr().err.splitlines() == [
        "predict: 16 of 40 sequences (40%)", "predict: 32 of 40 sequences (80%)"]
