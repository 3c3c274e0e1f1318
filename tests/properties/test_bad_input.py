"""Bad input, command by command, through `bert-jax` itself: each case ends with exit
code 2 and one line `bert-jax COMMAND: error: ...` naming the key or file, before any
work, and leaves its workdir (or output) as it was: absent when it was absent, the
same files with the same sizes and times when it existed.

Cases name a `{placeholder}` for the fixtures' paths; `{new}` is a fresh path that
must still not exist afterwards."""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.host import workdir_lock
from bert_jax.models import heads
from bert_jax.models.presets import preset
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.weights import pretrained

from helpers import REPO
from helpers.finetune import MICRO_MODEL
from helpers.words import assert_failure_line

PRETRAIN = ["pretrain", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
            "--workdir", "{new}", "--config.input_files={corpus}",
            "--config.max_seq_length=32", "--config.global_batch_size=8",
            "--config.max_predictions_per_seq=5", "--config.eval_fraction=0.1"]
FINETUNE = ["finetune", "--config", os.path.join(REPO, "configs", "finetune.py") + ":csv,tiny",
            "--workdir", "{new}", f"--config.model={MICRO_MODEL}", "--config.max_seq_length=32",
            "--config.global_batch_size=8", "--config.train_file={train}",
            "--config.validation_file={dev}"]
SMALL = "{'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 32, " \
    "'num_attention_heads': 2, 'intermediate_size': 64, 'max_position_embeddings': 64}"

CASES = {
    # pretrain: every check runs before model/, data/ or checkpoints/ are written
    "pretrain untyped value": (PRETRAIN + ["--config.num_train_steps=five"],
                               "config key 'num_train_steps' expects int (like 3000), got str "
                               "'five'"),
    "pretrain unknown key": (PRETRAIN + ["--config.lerning_rate=1"],
                             "unknown config key 'lerning_rate'; did you mean learning_rate or "
                             "allow_zero_learning_rate?"),
    "pretrain unknown key, nothing near": (
        PRETRAIN + ["--config.zzz=1"],
        "unknown config key 'zzz'; known here: allow_zero_learning_rate, alpha, "),
    "pretrain zero batch": (PRETRAIN + ["--config.global_batch_size=0"],
                            "global_batch_size must be an integer >= 1, got 0"),
    "pretrain negative batch": (PRETRAIN + ["--config.global_batch_size=-4"],
                                "global_batch_size must be an integer >= 1, got -4"),
    "pretrain batch not divisible": (PRETRAIN + ["--config.global_batch_size=12"],
                                     "global_batch_size 12 must be a multiple of 8"),
    "pretrain zero steps": (PRETRAIN + ["--config.num_train_steps=0"],
                            "num_train_steps must be an integer >= 1, got 0"),
    "pretrain warmup past the end": (PRETRAIN + ["--config.num_train_steps=10"],
                                     "warmup_steps 300 exceeds num_train_steps 10"),
    "pretrain sequence too short": (PRETRAIN + ["--config.max_seq_length=2"],
                                    "max_seq_length must be at least 8"),
    "pretrain sequence past the positions": (
        PRETRAIN + ["--config.max_seq_length=1024"],
        "max_seq_length 1024 exceeds the max_position_embeddings 512 of model 'tiny'"),
    "pretrain vocabulary past the model's": (
        PRETRAIN + ["--config.model={'preset': 'tiny', 'vocab_size': 100}"],
        "the tokenizer has 8192 tokens but model {'preset': 'tiny', 'vocab_size': 100} has "
        "vocab_size=100"),
    "pretrain unknown preset": (PRETRAIN + ["--config.model=tinyy"],
                                "unknown model preset 'tinyy'"),
    "pretrain unknown optimizer": (PRETRAIN + ["--config.optimizer=sgd"],
                                   "optimizer must be one of adamw, lamb; got 'sgd'"),
    "pretrain bad on_nonfinite": (PRETRAIN + ["--config.on_nonfinite=maybe"],
                                  "on_nonfinite must be one of skip, stop; got 'maybe'"),
    "pretrain no input files": (PRETRAIN + ["--config.input_files=/no/such/*.txt"],
                                "input_files: '/no/such/*.txt' matches no file"),
    "pretrain empty corpus": (PRETRAIN + ["--config.input_files={empty}"],
                              "no text in the input ({empty})"),
    # resuming a workdir with keys that cannot change
    "resume with another model": (
        PRETRAIN[:4] + ["{pretrained}"] + PRETRAIN[5:] + ["--config.model=" + SMALL.replace(
            "'hidden_size': 32", "'hidden_size': 64")],
        "was written by a different run (model.hidden_size 32 -> 64)"),
    "resume with another optimizer": (
        PRETRAIN[:4] + ["{pretrained}"] + PRETRAIN[5:] + [f"--config.model={SMALL}",
                                                          "--config.optimizer=lamb"],
        "(optimizer 'adamw' -> 'lamb'): these keys cannot change on resume"),
    "resume with another sequence length": (
        PRETRAIN[:4] + ["{pretrained}"] + PRETRAIN[5:] + [f"--config.model={SMALL}",
                                                          "--config.max_seq_length=48"],
        "(max_seq_length 32 -> 48)"),
    # finetune
    "finetune zero batch": (FINETUNE + ["--config.global_batch_size=0"],
                            "global_batch_size must be an integer >= 1, got 0"),
    "finetune negative batch": (FINETUNE + ["--config.global_batch_size=-4"],
                                "global_batch_size must be an integer >= 1, got -4"),
    "finetune zero eval batch": (FINETUNE + ["--config.eval_batch_size=0"],
                                 "eval_batch_size must be an integer >= 1, got 0"),
    "finetune zero epochs": (FINETUNE + ["--config.num_train_epochs=0"],
                             "num_train_epochs must be a number > 0, got 0.0"),
    "finetune sequence too short": (FINETUNE + ["--config.max_seq_length=2"],
                                    "max_seq_length must be at least 8"),
    "finetune sequence past the positions": (
        FINETUNE + ["--config.max_seq_length=1024"],
        "max_seq_length 1024 exceeds the max_position_embeddings 512 of random "
        "{'hidden_size': 32, "),
    "finetune blank label": (FINETUNE + ["--config.train_file={blank_label}"],
                             "{blank_label}:3: blank label (column 'label')"),
    "finetune empty split": (FINETUNE + ["--config.validation_file={header_only}"],
                             "{header_only} has no rows"),
    "finetune missing file": (FINETUNE + ["--config.train_file=/no/such.tsv"],
                              "no such file: /no/such.tsv"),
    "finetune bad keep_checkpoint": (FINETUNE + ["--config.keep_checkpoint=first"],
                                     "keep_checkpoint must be one of best, last; got 'first'"),
    "finetune bad pooling": (FINETUNE + ["--config.pooling=max"],
                             "pooling must be one of pooler, mean; got 'max'"),
    "finetune untyped value": (FINETUNE + ["--config.warmup_proportion=three"],
                               "config key 'warmup_proportion' expects float"),
    "finetune bad number": (FINETUNE + ["--config.num_train_epochs=three"],
                            "config key 'num_train_epochs' expects float (like 1.0), got str "
                            "'three'"),
    "finetune bad sweep": (FINETUNE + ["--config.sweep.num_train_epochs=2,three"],
                           "sweep.num_train_epochs must be a number or a comma-separated list "
                           "of numbers, got '2,three'"),
    "finetune bad freeze": (FINETUNE + ["--config.freeze=encoder/*"],
                            "freeze pattern 'encoder/*' matches no parameter"),
    # evaluate / predict
    "evaluate unknown split": (["evaluate", "--model", "{finetuned}", "--split", "bogus"],
                               "--split 'bogus' is not a split of task 'csv'; known: train, "
                               "validation"),
    "evaluate without a model": (["evaluate", "--model", "{new}"],
                                 "{new}: no such directory (a model is a model directory, a "
                                 "pretraining or fine-tuning workdir, or hf:ORG/NAME)"),
    "predict missing input": (["predict", "--model", "{finetuned}", "--input", "/no/such.txt"],
                              "no such file: /no/such.txt"),
    # embed / export
    "embed zero batch": (["embed", "--model", "{model}", "--input", "{texts}", "--output",
                          "{new}", "--batch_size", "0"],
                         "--batch_size must be an integer >= 1, got 0"),
    "embed vocabulary past the model's": (
        ["embed", "--model", "{small_vocab_model}", "--input", "{texts}", "--output",
         "{new}"], "the tokenizer has 8192 tokens but {small_vocab_model} has vocab_size=100"),
    "embed no model": (["embed", "--model", "/no/model", "--input", "{texts}", "--output",
                        "{new}"], "/no/model: no such directory"),
    "embed empty file": (["embed", "--model", "{model}", "--input", "{empty}", "--output",
                          "{new}"], "{empty} has no lines: nothing to embed"),
    "predict blank input": (["predict", "--model", "{finetuned}", "--input", "{blank}"],
                            "{blank} holds no inputs (empty, or blank lines only)"),
    "embed bad utf-8": (["embed", "--model", "{model}", "--input", "{latin1}", "--output",
                         "{new}"],
                        "{latin1}:2: not UTF-8 text (byte 0xe9 at offset 8); convert it to UTF-8"),
    "create-data Latin-1 text": (  # issue 44: refused, not café -> caf
        ["create-data", "--input", "{latin1}", "--output", "{new}", "--num_workers", "1",
         "--no_progress"],
        "{latin1}:2: not UTF-8 text (byte 0xe9 at offset 8); convert it to UTF-8 first, e.g. "
        "`iconv -f latin1 -t utf-8` for Latin-1 text"),
    "export vocabulary past the model's": (
        ["export", "--model", "{small_vocab_model}", "--output", "{new}"],
        "the tokenizer has 8192 tokens but {small_vocab_model} has vocab_size=100"),
    # data and vocabularies
    "create-data empty file": (["create-data", "--input", "{empty}", "--output", "{new}"],
                               "no text in the input ({empty})"),
    "create-data no examples": (["create-data", "--input", "{controls}", "--output", "{new}",
                                 "--no_progress"],
                                "no pretraining examples from 1 input file(s): 0 documents, 0 "
                                "sentences"),
    "create-data missing file": (["create-data", "--input", "/no/such.txt", "--output", "{new}"],
                                 "input file not found: /no/such.txt"),
    "train-tokenizer empty file": (["train-tokenizer", "--input", "{empty}", "--output", "{new}"],
                                   "no text in the input ({empty})"),
    # data mistakes found before any step (issue 32)
    "config syntax error": (["pretrain", "--config", "{broken_config}", "--workdir", "{new}"],
                            "{broken_config}:3: "),
    "pretrain records of another sequence length": (
        PRETRAIN + ["--config.input_files={records}/*.tfrecord", "--config.max_seq_length=48"],
        "/pretrain-00000-of-00002.tfrecord was written with max_seq_length 32 but the run asks "
        "for 48: set --config.max_seq_length=32, or recreate the data"),
    "pretrain records of another vocabulary": (  # issue 44: the data record's fingerprint
        PRETRAIN + ["--config.input_files={other_vocab_records}/*.tfrecord"],
        "the record shards in {other_vocab_records} were made with the vocabulary /elsewhere/vocab "
        "(its options.json), not this run's "),
    # issue 44: the masking setup create-data recorded in options.json
    "pretrain static records made without whole words": (
        PRETRAIN + ["--config.input_files={records}/*.tfrecord", "--config.dynamic_masking=False",
                    "--config.whole_word_masking=True"],
        "the record shards in {records} were made with whole_word_masking False (its options.json) "
        "but this run has whole_word_masking True: their static masks are as made"),
    "pretrain NSP records without NSP": (
        PRETRAIN + ["--config.input_files={records}/*.tfrecord",
                    "--config.next_sentence_prediction=False"],
        "the record shards in {records} were made with next_sentence_prediction True (its "
        "options.json) but this run has next_sentence_prediction False: "),
    "pretrain NSP records with SOP": (
        PRETRAIN + ["--config.input_files={records}/*.tfrecord",
                    "--config.sentence_order_prediction=True"],
        "were made with sentence_order_prediction False (its options.json) but this run has "
        "sentence_order_prediction True"),
    # issue 44: input files told apart by content, not by name
    "pretrain TFRecords mixed with text": (
        PRETRAIN + ["--config.input_files={records}/*.tfrecord,{texts}"],
        "input_files mixes record shards ({records}/pretrain-00000-of-00002.tfrecord, "
        "{records}/pretrain-00001-of-00002.tfrecord) and other files, read as text ({texts}): "
        "name one kind"),
    "create-data into a pretraining workdir": (  # issue 44: shards never among a run's files
        ["create-data", "--output", "{pretrained}", "--no_progress", "--num_workers", "1"],
        "--output {pretrained} holds a pretraining run (bert-jax pretrain): write the "
        "TFRecords into a folder of their own"),
    "create-data on TFRecords": (
        ["create-data", "--input", "{records}/pretrain-00000-of-00002.tfrecord", "--output",
         "{new}", "--no_progress"],
        "{records}/pretrain-00000-of-00002.tfrecord is a TFRecord file (pretraining data "
        "already), not text"),
    "pretrain records of another prediction count": (
        PRETRAIN + ["--config.input_files={records}/*.tfrecord",
                    "--config.max_predictions_per_seq=6"],
        "was written with max_predictions_per_seq 5 but the run asks for 6"),
    "pretrain init_from a fine-tuning workdir": (
        PRETRAIN + ["--config.init_from={finetuned}"],
        "{finetuned} is a model fine-tuned on 'csv', without the pretraining heads: pretrain "
        "from a pretrained model, or take its encoder alone with "
        "--config.partial_restore=true"),
    "finetune empty test file": (FINETUNE + ["--config.test_file={header_only}"],
                                 "{header_only} has no rows"),
    "create-data truncated gzip": (
        ["create-data", "--input", "{truncated_gz}", "--output", "{new}", "--no_progress",
         "--num_workers", "1"], "{truncated_gz}: truncated or corrupt gzip file"),
    # one writer per workdir: {busy} holds the lock of a live process (this one)
    "pretrain busy workdir": (PRETRAIN[:4] + ["{busy}"] + PRETRAIN[5:],
                              "{busy} is in use by another run (host {host}, pid {pid}, "
                              "bert-jax finetune started "),
    "finetune busy workdir": (FINETUNE[:4] + ["{busy}"] + FINETUNE[5:],
                              "{busy} is in use by another run (host {host}, pid {pid}, "),
    # No command replaces another run's results (issue 44): refused before any write.
    "finetune from its own workdir": (
        FINETUNE[:4] + ["{pretrained}"] + FINETUNE[5:] + ["--init_from", "{pretrained}"],
        "the output folder {pretrained} is also --init_from: writing there would replace "
        "what this command reads"),
    "finetune into a pretraining workdir": (
        FINETUNE[:4] + ["{pretrained}"] + FINETUNE[5:],
        "{pretrained} holds a pretraining run (bert-jax pretrain) whose results this command "
        "would replace; choose another folder"),
    "pretrain into a fine-tuning workdir": (
        PRETRAIN[:4] + ["{finetuned}"] + PRETRAIN[5:],
        "{finetuned} holds a fine-tuning run (bert-jax finetune) whose results this command "
        "would replace"),
    "distill into a pretraining workdir": (
        ["distill", "--teacher", "{finetuned}", "--student", "{model}", "--workdir",
         "{pretrained}"], "{pretrained} holds a pretraining run (bert-jax pretrain)"),
    "export over a pretraining workdir": (
        ["export", "--model", "{finetuned}", "--output", "{pretrained}", "--overwrite"],
        "{pretrained} holds a pretraining run (bert-jax pretrain) whose results"),
    # One line instead of "internal error" (issue 44)
    "pretrain with a fine-tuning config": (
        ["pretrain", "--config", os.path.join(REPO, "configs", "finetune.py") + ":csv",
         "--workdir", "{new}"],
        "finetune.py is not a pretrain config (it has no 'input_files' key; it is a config for "
        "`bert-jax finetune`): `bert-jax pretrain` takes configs/pretrain.py[:VARIANT]"),
    "finetune with a pretraining config": (
        ["finetune", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
         "--workdir", "{new}"],
        "pretrain.py is not a finetune config (it has no 'task' key; it is a config for "
        "`bert-jax pretrain`): `bert-jax finetune` takes configs/finetune.py[:VARIANT]"),
    "finetune CoNLL without tags": (
        ["finetune", "--config", os.path.join(REPO, "configs", "finetune.py") + ":conll,tiny",
         "--workdir", "{new}", f"--config.model={MICRO_MODEL}", "--config.max_seq_length=32",
         "--config.global_batch_size=8", "--config.train_file={words}",
         "--config.validation_file={words}"],
        "{words} has no tag column: training needs a token and its tag on each line"),
    "predict without the text column": (
        ["predict", "--model", "{finetuned}", "--input", "{no_text}"],
        "no_text.tsv has no text column 'text'; its columns are: 'sentence', 'x' (name the "
        "column 'text' in the file's header, or give plain text, one input per line)"),
    "pretrain odd layer preset": (
        PRETRAIN + ["--config.model=bert-L3-H128"],
        "bert-L{2,4,6,8,10,12}-H{128,256,512,768}"),
    # Validation before work (issue 44)
    "pretrain eval_fraction 0": (
        PRETRAIN + ["--config.eval_fraction=0"],
        "eval_fraction 0 holds out nothing to evaluate on every eval_every_steps "),
    "pretrain negative learning rate": (
        PRETRAIN + ["--config.learning_rate=-0.001"],
        "learning_rate must be a number > 0, got -0.001 (a negative rate raises the loss)"),
    "finetune zero learning rate": (
        FINETUNE + ["--config.learning_rate=0"],
        "learning_rate must be a number > 0, got 0.0 (nothing would train; a linear probe "
        "trains the head alone: --config.freeze='bert/*' with a learning rate > 0; to score a "
        "fine-tuned model without training: bert-jax evaluate --model DIR)"),
    "finetune test label unseen in training": (
        FINETUNE + ["--config.test_file={other_label}"],
        "the test split: label 'meh' is not among the training labels"),
    "convert onto its own input": (
        ["convert", "--model", "{finetuned}", "--to_hf", "{finetuned}", "--overwrite"],
        "--to_hf {finetuned} is also --model"),
}


def fill(text, values):
    """`text` with each `{name}` of `values` replaced (configs hold other braces)."""
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


def save_model(path, **fields):
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    config = preset("tiny", **{"vocab_size": tokenizer.vocab_size, "num_hidden_layers": 1,
                                   "hidden_size": 32, "num_attention_heads": 2,
                                   "intermediate_size": 64, **fields})
    model = heads.BertForSequenceClassification(config, 2)
    params = model.init(jax.random.key(0), jnp.ones((1, 4), jnp.int32))["params"]
    pretrained.save(path, config, jax.tree.map(np.asarray, params), tokenizer=tokenizer)
    return path


def pretrained_args(values):
    """The fixture's pretraining run: 2 steps, a checkpoint at the end."""
    return [fill(a, {**values, "new": values["pretrained"]}) for a in PRETRAIN] + [
        f"--config.model={SMALL}", "--config.num_train_steps=2", "--config.warmup_steps=1",
        "--config.eval_every_steps=0", "--config.checkpoint_every_steps=2"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory, text_corpus):
    root = tmp_path_factory.mktemp("bad_input")
    (root / "empty.txt").write_text("")
    (root / "texts.txt").write_text("one line\nanother\n")
    (root / "controls.txt").write_text("\x01\n\x02\n\n\x03\n")  # no text once cleaned
    (root / "latin1.txt").write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    rows = ["text\tlabel", "a good film\tpos", "\tneg", "a bad film\tneg"]
    (root / "train.tsv").write_text("\n".join(rows[:2] + rows[3:] + rows[1:2] + rows[3:]) + "\n")
    (root / "dev.tsv").write_text("\n".join(rows[:2] + rows[3:]) + "\n")
    (root / "blank_label.tsv").write_text("text\tlabel\na good film\tpos\na film\t\n")
    (root / "header_only.tsv").write_text("text\tlabel\n")
    (root / "words.txt").write_text("Paris\nis\nbig\n\nRome\ntoo\n")  # CoNLL without tags
    (root / "no_text.tsv").write_text("sentence\tx\nhello\t1\n")
    (root / "other_label.tsv").write_text("text\tlabel\na good film\tpos\na film\tmeh\n")
    (root / "blank.txt").write_text("  \n\n\t\n")
    values = {name: str(root / f"{name}.{ext}") for name, ext in (
        ("empty", "txt"), ("controls", "txt"), ("texts", "txt"), ("latin1", "txt"),
        ("train", "tsv"), ("dev", "tsv"), ("blank_label", "tsv"), ("header_only", "tsv"),
        ("blank", "txt"), ("other_label", "tsv"), ("words", "txt"), ("no_text", "tsv"))}
    values["corpus"] = text_corpus
    values["model"] = save_model(str(root / "model"))
    values["small_vocab_model"] = save_model(str(root / "small_vocab"), vocab_size=100)
    # One real pretraining run (2 steps) and one fine-tuning run, to resume and evaluate.
    values["pretrained"] = str(root / "pretrained")
    assert cli.main(pretrained_args(values)) == 0
    values["finetuned"] = str(root / "finetuned")
    assert cli.main([fill(a, {**values, "new": values["finetuned"]}) for a in FINETUNE]) == 0
    (root / "broken.py").write_text("def get_config():\n    c = 1\n    return c +\n")
    values["broken_config"] = str(root / "broken.py")
    values["records"] = str(root / "records")  # TFRecords at max_seq_length 32, 5 predictions
    assert cli.main(["create-data", "--input", text_corpus, "--output", values["records"],
                     "--max_seq_length", "32", "--max_predictions_per_seq", "5",
                     "--num_shards", "2", "--num_workers", "1", "--no_progress"]) == 0
    values["other_vocab_records"] = str(root / "other_vocab_records")
    shutil.copytree(values["records"], values["other_vocab_records"])
    record_path = os.path.join(values["other_vocab_records"], "options.json")
    with open(record_path) as f:
        record = json.load(f)
    assert record["vocabulary"] == load_tokenizer(DEFAULT_VOCAB).fingerprint()
    with open(record_path, "w") as f:
        json.dump({**record, "tokenizer": "/elsewhere/vocab", "vocabulary": "0" * 64}, f)
    with open(glob.glob(text_corpus)[0], "rb") as f:
        packed = gzip.compress(f.read())
    (root / "truncated.txt.gz").write_bytes(packed[:len(packed) // 2])
    values["truncated_gz"] = str(root / "truncated.txt.gz")
    values["busy"] = str(root / "busy")
    lock = workdir_lock.WorkdirLock(values["busy"], "bert-jax finetune")
    lock.acquire()  # held by this (live) process for the module's tests
    values.update(host=lock.owner["host"], pid=str(lock.owner["pid"]))
    yield values
    lock.release()


def snapshot(path):
    """Every file under `path` with its size and modification time (None: no path)."""
    if not os.path.exists(path):
        return None
    return sorted((os.path.relpath(os.path.join(root, name), path),
                   os.path.getsize(os.path.join(root, name)),
                   os.stat(os.path.join(root, name)).st_mtime_ns)
                  for root, _, names in os.walk(path) for name in names)


@pytest.mark.parametrize("args, message", list(CASES.values()), ids=list(CASES))
def test_bad_input_gets_one_line_and_leaves_nothing(args, message, paths, tmp_path, capsys):
    values = {**paths, "new": str(tmp_path / "new")}
    args = [fill(a, values) for a in args]
    touched = [a for a in args if a in (paths["pretrained"], paths["finetuned"], paths["busy"])]
    before = {path: snapshot(path) for path in touched}
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert_failure_line(err, args[0])
    assert fill(message, values) in err, err
    assert not os.path.exists(values["new"]), os.listdir(values["new"])
    assert {path: snapshot(path) for path in touched} == before


@pytest.mark.long
def test_a_subprocess_gets_exit_code_2_and_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bert_jax.cli", "pretrain", "--config",
         os.path.join(REPO, "configs", "pretrain.py") + ":tiny", "--workdir",
         str(tmp_path / "w"), "--config.num_train_steps=five"],
        env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr == ("bert-jax pretrain: error: config key 'num_train_steps' expects "
                             "int (like 3000), got str 'five'\n")
    assert not (tmp_path / "w").exists()


def test_a_bug_gets_one_line_naming_the_traceback_file(monkeypatch, capsys):
    from bert_jax.serve import cli as serve_cli

    def broken(argv):
        return 1 // 0

    monkeypatch.setattr(serve_cli, "embed_main", broken)
    assert cli.main(["embed"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bert-jax embed: internal error (a bug, please report it): "
                          "ZeroDivisionError: integer division or modulo by zero; full "
                          "traceback in ") and err.count("\n") == 1, err
    path = err.rsplit(" ", 1)[1].strip()
    assert "return 1 // 0" in open(path).read()
    os.remove(path)
    with pytest.raises(ZeroDivisionError):
        cli.main(["embed", "--debug"])


def test_finetune_rerun_clears_outputs_and_evaluate_works_from_anywhere(paths, tmp_path,
                                                                        monkeypatch, capsys):
    workdir = paths["finetuned"]
    stale = os.path.join(workdir, "predictions", "old.jsonl")
    os.makedirs(os.path.dirname(stale), exist_ok=True)
    open(stale, "w").close()
    monkeypatch.chdir(tmp_path)  # the model's data paths must not depend on the cwd
    assert cli.main(["evaluate", "--model", workdir, "--file", paths["dev"]]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["dev.tsv"]
    assert cli.main(["evaluate", "--model", workdir]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["validation"]
    assert cli.main([fill(a, {**paths, "new": workdir}) for a in FINETUNE]) == 0
    assert not os.path.exists(stale)
    assert not os.path.exists(os.path.join(workdir, "evaluate_results.json"))
    # ... moved aside, not deleted (issue 44), and said so
    aside = glob.glob(os.path.join(workdir, "previous", "*"))
    assert len(aside) == 1, aside
    assert {"best", "eval_results.json", "evaluate_results.json", "metrics.jsonl",
            "predictions"} <= set(os.listdir(aside[0]))
    assert os.path.exists(os.path.join(aside[0], "predictions", "old.jsonl"))
    assert f"its results are moved to {aside[0]}" in capsys.readouterr().err


def test_evaluate_prints_its_metrics_before_a_write_that_fails(paths, tmp_path, capsys):
    out = str(tmp_path / "missing" / "results.json")  # as a read-only folder (tests run as root)
    capsys.readouterr()
    assert cli.main(["evaluate", "--model", paths["finetuned"], "--output", out]) == 2
    captured = capsys.readouterr()
    assert list(json.loads(captured.out)) == ["validation"]
    assert captured.err.startswith(f"bert-jax evaluate: error: could not write {out} (No such "
                                   "file or directory): the metrics are printed above") \
        and captured.err.count("\n") == 1, captured.err
    assert not os.path.exists(os.path.dirname(out))


def test_a_completed_pretraining_run_rerun_says_so_and_returns_its_metrics(paths, capsys):
    from bert_jax.pretrain import job
    from bert_jax.train.config_loader import load_config
    from bert_jax.train.job_cli import split_config_args
    workdir = paths["pretrained"]
    steps = checkpoint_steps(workdir)
    capsys.readouterr()
    assert cli.main(pretrained_args(paths)) == 0
    assert f"{workdir} holds a complete run (2 of 2 steps): nothing to train" in \
        capsys.readouterr().err
    args, overrides = split_config_args(pretrained_args(paths)[1:])
    results = job.train_and_evaluate(load_config(args[1], overrides), workdir)
    assert "loss" in results["train"] and results["eval"] == {}  # the notebook's KeyError
    assert checkpoint_steps(workdir) == steps


def test_utf16_and_utf32_text_with_a_byte_order_mark_is_read(tmp_path):
    from bert_jax.data import corpus
    from bert_jax.finetune import files
    text = "café one\nsecond line\n\nnext doc\n"
    for codec in ("utf-16", "utf-32", "utf-8-sig"):
        path = tmp_path / f"{codec}.txt"
        path.write_bytes(text.encode(codec))
        assert list(corpus.iter_lines(str(path), corpus.ReadStats())) == \
            ["café one", "second line", "", "next doc"]
        table = tmp_path / f"{codec}.tsv"
        table.write_bytes("text\tlabel\ncafé\tpos\n".encode(codec))
        assert files.read_table(str(table))[0][0]["text"] == "café"


def test_tokenize_refuses_latin1_input_instead_of_printing_garbage():
    result = subprocess.run([sys.executable, "-m", "bert_jax.cli", "tokenize"],
                            input="fine\ncaf\xe9\n".encode("latin-1"), capture_output=True,
                            env={**os.environ, "PYTHONPATH": REPO}, timeout=120)
    assert result.returncode == 2
    assert result.stderr.decode() == ("bert-jax tokenize: error: stdin:2: not UTF-8 text (byte "
                                      "0xe9 at offset 8); convert it to UTF-8 first, e.g. "
                                      "`iconv -f latin1 -t utf-8` for Latin-1 text\n")


def test_compile_without_libtpu_says_what_to_install(monkeypatch):
    from jax.experimental import topologies as jax_topologies

    from bert_jax import errors
    from bert_jax.aot import compile as tpu_compile
    from bert_jax.aot import tpu_slices

    def missing(**kwargs):
        raise RuntimeError("JAX TPU support not installed; cannot generate TPU topology")

    monkeypatch.setattr(jax_topologies, "get_topology_desc", missing)
    with pytest.raises(errors.UserError, match=r"needs libtpu, which is not installed: pip "
                       r"install -e \.\[tpu\]"):
        tpu_compile.topology_devices(tpu_slices.resolve(tpu_slices.names()[0]))


def test_a_glob_catching_summary_json_reads_only_the_tfrecords(paths, caplog):
    from bert_jax.pretrain import inputs
    from bert_jax.train.config_loader import load_config
    config = load_config(os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
                         [f"input_files={paths['records']}/*"])
    files = inputs.input_files(config.input_files)
    assert [os.path.basename(f) for f in files] == ["pretrain-00000-of-00002.tfrecord",
                                                    "pretrain-00001-of-00002.tfrecord"]
    assert "skipping 2 file(s) that are not TFRecords or text: options.json, summary.json" \
        in caplog.text


def test_tfrecords_are_known_by_their_content_not_their_name(paths, tmp_path):
    from bert_jax.pretrain import inputs
    from bert_jax.train.config_loader import load_config
    renamed = tmp_path / "shard.bin"  # e.g. Google's tool's --output_file=out.bin
    shutil.copy(os.path.join(paths["records"], "pretrain-00000-of-00002.tfrecord"), renamed)
    (tmp_path / "text.tfrecord").write_text("a sentence\n")
    config = load_config(os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
                         [f"input_files={renamed}"])
    assert inputs.input_files(config.input_files) == [str(renamed)]
    assert inputs.is_tfrecord(str(renamed))
    assert not inputs.is_tfrecord(str(tmp_path / "text.tfrecord"))
    config.input_files = str(tmp_path / "*")
    with pytest.raises(ValueError, match=r"mixes record shards \(.*shard.bin\) and other "
                       r"files, read as text \(.*text.tfrecord\)"):
        inputs.input_files(config.input_files)


def test_records_made_before_the_setup_was_recorded_train_with_one_warning(paths, tmp_path,
                                                                         caplog):
    from bert_jax.data.options import DataOptions
    from bert_jax.pretrain import inputs
    from bert_jax.train.config_loader import load_config
    old = str(tmp_path / "old")
    shutil.copytree(paths["records"], old)
    with open(os.path.join(old, "options.json")) as f:
        record = json.load(f)
    os.remove(os.path.join(old, "options.json"))
    with open(os.path.join(old, "summary.json"), "w") as f:  # before the setup was recorded
        json.dump({"instances": 10, "vocab": record["tokenizer"],
                   "vocab_fingerprint": record["vocabulary"]}, f)
    files = sorted(glob.glob(os.path.join(old, "*.tfrecord")))
    config = load_config(os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
                         ["dynamic_masking=False", "whole_word_masking=True"])
    inputs.check_records_made_for(files, DEFAULT_VOCAB, record["vocabulary"],
                                  DataOptions.from_config(config))
    warned = [r.getMessage() for r in caplog.records if "cannot be checked" in r.getMessage()]
    assert len(warned) == 1 and old in warned[0], caplog.text


def checkpoint_steps(workdir):
    return sorted(int(n) for n in os.listdir(os.path.join(workdir, "checkpoints")) if n.isdigit())


@pytest.mark.long
def test_a_diverging_pretraining_run_stops_with_one_line_and_keeps_its_checkpoints(
        paths, tmp_path, capsys, caplog):
    workdir = str(tmp_path / "diverged")
    # A huge learning rate without clipping: the parameters overflow, then every step is NaN.
    args = [fill(a, {**paths, "new": workdir}) for a in PRETRAIN] + [
        f"--config.model={SMALL}", "--config.learning_rate=1e30", "--config.max_grad_norm=0.0",
        "--config.warmup_steps=0", "--config.num_train_steps=20", "--config.log_every_steps=1",
        "--config.checkpoint_every_steps=2", "--config.eval_every_steps=0"]
    capsys.readouterr()
    assert cli.main(args) == 1
    err = capsys.readouterr().err  # progress lines, then the one line of the stop
    assert "Traceback" not in err and "internal error" not in err, err
    err = err.splitlines()[-1]
    assert err.startswith("bert-jax pretrain: error: step 6: loss nan, gradient norm nan: "
                          "non-finite for 5 step(s) in a row, the run diverged"), err
    assert "--config.learning_rate" in err and "warmup_steps" in err and "bfloat16" in err
    skips = [r.getMessage() for r in caplog.records if "update skipped" in r.getMessage()]
    assert [m.split(":")[0] for m in skips] == ["step 2", "step 3", "step 4", "step 5"]
    # The steps before the stop were saved (skipped steps keep the parameters): all finite,
    # none after the stop, nothing half-written.
    assert checkpoint_steps(workdir) == [2, 4]
    assert not glob.glob(os.path.join(workdir, "checkpoints", "*tmp*"))
    params = pretrained.load_pretrained_from_workdir(workdir).params
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))


@pytest.mark.long
def test_a_diverging_finetuning_run_stops_and_writes_no_best_model(paths, tmp_path, capsys):
    rows = "".join(f"a good film {i}\tpos\na bad film {i}\tneg\n" for i in range(24))
    (tmp_path / "train.tsv").write_text("text\tlabel\n" + rows)
    workdir = str(tmp_path / "diverged")
    args = [fill(a, {**paths, "new": workdir, "train": str(tmp_path / "train.tsv")})
            for a in FINETUNE] + ["--config.learning_rate=1e30", "--config.max_grad_norm=0.0",
                                  "--config.warmup_proportion=0.0", "--config.log_every_steps=1"]
    capsys.readouterr()
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    err = err.splitlines()[-1]
    assert err.startswith("bert-jax finetune: error: step ") and \
        "non-finite for 5 step(s) in a row" in err, err
    assert "--config.warmup_proportion" in err, err
    assert not os.path.exists(os.path.join(workdir, "best"))
    assert not os.path.exists(os.path.join(workdir, "eval_results.json"))


@pytest.mark.long
def test_ctrl_c_saves_a_checkpoint_and_exits_with_one_line(paths, tmp_path, capsys, monkeypatch):
    import signal

    from bert_jax.train import sharding
    workdir = str(tmp_path / "interrupted")
    place, calls = sharding.Partitioner.global_batch, []

    def ctrl_c_at_step_3(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return place(*args, **kwargs)

    monkeypatch.setattr(sharding.Partitioner, "global_batch", ctrl_c_at_step_3)
    args = [fill(a, {**paths, "new": workdir}) for a in PRETRAIN] + [
        f"--config.model={SMALL}", "--config.num_train_steps=10", "--config.warmup_steps=1",
        "--config.checkpoint_every_steps=5", "--config.eval_every_steps=0"]
    handler = signal.getsignal(signal.SIGINT)  # SIG_IGN under `nohup ... &`
    capsys.readouterr()
    assert cli.main(args) == 130
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (f"bert-jax pretrain: interrupted at step 3: checkpoint 3 saved in "
                   f"{workdir}/checkpoints; the same command resumes from it")
    assert checkpoint_steps(workdir) == [3]
    assert not os.path.exists(os.path.join(workdir, workdir_lock.LOCK_FILE))
    assert signal.getsignal(signal.SIGINT) is handler  # restored


@pytest.mark.parametrize("reader", ["grain", "tf.data"])
def test_a_corrupt_tfrecord_file_is_named(paths, tmp_path, capsys, reader):
    """A flipped byte: Grain names the file and record when its random order reaches it (within
    the first epoch), tf.data the file."""
    records = tmp_path / "records"
    records.mkdir()
    for path in sorted(glob.glob(os.path.join(paths["records"], "*.tfrecord"))):
        data = bytearray(open(path, "rb").read())
        if path.endswith("00001-of-00002.tfrecord"):
            data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the file
        (records / os.path.basename(path)).write_bytes(bytes(data))
    bad = str(records / "pretrain-00001-of-00002.tfrecord")
    args = [fill(a, {**paths, "new": str(tmp_path / "w")}) for a in PRETRAIN] + [
        f"--config.model={SMALL}", f"--config.input_files={records}/*.tfrecord",
        "--config.num_train_steps=5000", "--config.warmup_steps=1",
        "--config.eval_every_steps=0", "--config.checkpoint_every_steps=5000",
        f"--config.input_pipeline={reader}"]
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    named = (f"{re.escape(bad)}: record [0-9]+ fails its checksum" if reader == "grain" else
             f"{re.escape(bad)}: corrupt or truncated TFRecord file \\(")
    assert re.match(f"bert-jax pretrain: error: {named}", err.splitlines()[-1]), err


def test_create_data_rerun_with_fewer_shards_removes_the_earlier_ones(paths, tmp_path, capsys):
    out = str(tmp_path / "records")
    for shards in ("3", "2"):
        assert cli.main(["create-data", "--input", paths["texts"], "--output", out,
                         "--num_shards", shards, "--num_workers", "1", "--no_progress"]) == 0
    assert "removed 3 shard(s) of an earlier run" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["options.json", "pretrain-00000-of-00002.tfrecord",
                                       "pretrain-00001-of-00002.tfrecord", "summary.json"]


def test_version(capsys):
    from bert_jax import __version__
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"bert-jax {__version__}\n"


def test_embed_reads_a_fine_tuning_workdir_as_convert_does(paths, tmp_path, capsys):
    out = str(tmp_path / "vectors.npy")
    assert cli.main(["embed", "--model", paths["finetuned"], "--input", paths["texts"],
                     "--output", out]) == 0
    assert np.load(out).shape == (2, 32)


def test_silent_surprises_get_a_warning(paths, tmp_path, caplog):
    from bert_jax.finetune import files
    from bert_jax.finetune.tasks import csv_task
    from bert_jax.tokenization import wordpiece
    # Labels 1, 5 and five: three classes, and a line saying so.
    assert csv_task.infer_labels(["1", "5", "five", "1"]) == ["1", "5", "five"]
    assert "the labels mix numbers (1, 5) and words (five)" in caplog.text
    # A stray quote merges rows: a warning naming the line; one never closed is an error there.
    (tmp_path / "stray.csv").write_text('text,label\na,pos\n"b,neg\nc,pos\nd",neg\ne,pos\n')
    rows, _ = files.read_table(str(tmp_path / "stray.csv"))
    assert [r.line for r in rows] == [2, 3, 6]
    assert "stray.csv: 1 row(s) hold quoted text over several lines (starting on line 3)" \
        in caplog.text
    (tmp_path / "open.csv").write_text('text,label\na,pos\n"b,neg\nc,pos\n')
    with pytest.raises(ValueError, match=r'open.csv:3: a quote \(\"\) opened on this line is '
                                         'not closed until line 4'):
        files.read_table(str(tmp_path / "open.csv"))
    # One class, and a validation file that is the training file (issue 44).
    from bert_jax.finetune import task_data, tasks
    from bert_jax.train.config_loader import load_config
    (tmp_path / "one.tsv").write_text("text\tlabel\na good film\tpos\nanother\tpos\n")
    config = load_config(os.path.join(REPO, "configs", "finetune.py") + ":csv",
                         [f"train_file={tmp_path / 'one.tsv'}",
                          f"validation_file={tmp_path / 'one.tsv'}"])
    task = tasks.get_task(config)
    task.prepare(task.load("train"))
    task_data.warn_if_degenerate(task, config.train_file, config.validation_file)
    assert "every training example has the label 'pos': the model can only learn" in caplog.text
    assert "one.tsv holds the training file's text" in caplog.text
    # Duplicate vocabulary entries.
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nfilm\nthe\n")
    assert len(wordpiece.read_vocab(str(vocab))) == 8
    assert "has 1 duplicate token(s) ('the' at lines 6 and 8)" in caplog.text
    # Chinese text with the default (English) vocabulary: nearly every token is [UNK].
    text = tmp_path / "zh.txt"
    text.write_text("".join("我们的国家很美丽今天天气不错。\n" * 4 + "\n" for _ in range(8)))
    assert cli.main(["create-data", "--input", str(text), "--output",
                     str(tmp_path / "zh"), "--num_workers", "1", "--no_progress"]) == 0
    assert "of the tokens of 1 input file(s) are [UNK]: the vocabulary does not cover this " \
        "text (Chinese text needs a Chinese vocabulary" in caplog.text
    # ... but English text with [UNK]s is not told about Chinese (issue 44).
    from bert_jax.tokenization.base import uncovered_text_warning
    english = uncovered_text_warning(8, 100, "task 'csv''s training data", cjk_share=0.0)
    assert english.startswith("8% of the tokens") and "Chinese" not in english


def test_out_of_device_memory_names_the_batch_and_the_levers(paths, tmp_path, capsys,
                                                             monkeypatch):
    from bert_jax.pretrain import job

    def out_of_memory(config, workdir, *args):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                           "12.50GiB.")

    monkeypatch.setattr(job, "train_and_evaluate", out_of_memory)
    workdir = str(tmp_path / "w")
    capsys.readouterr()
    assert cli.main([fill(a, {**paths, "new": workdir}) for a in PRETRAIN]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-jax pretrain: error: out of device memory (RESOURCE_EXHAUSTED) "
                          "at global_batch_size 8, max_seq_length 32: raise "
                          "--config.grad_accum_steps") and err.count("\n") == 1, err
    assert "README.md, Troubleshooting: Out of memory" in err
    assert not os.path.exists(workdir)  # the lock's directory, left empty: removed
