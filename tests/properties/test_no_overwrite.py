"""No command writes over what it reads, or over another job's files (issue 58, item 1).

Each case runs `bert-jax` itself and checks the exit code, the one line, and every file
on disk before and after (the inputs unchanged, nothing new written). Output paths
are compared after resolving symlinks and relative spellings. Classes covered:
- a file output equal to an input (predict CSV/JSONL, embed .txt, evaluate --file),
  spelled as given, through `dir/../`, or through a symlink;
- a file output that is an existing folder, or an existing file of a model directory
  or a run's folder (its config, its results), or that cannot be created (a file on
  its way); checked before the model is loaded;
- a folder output that is, or holds, the input (convert, export, extend-vocab), or a
  model directory, run folder or anything inside one (train-tokenizer);
- a model whose tokenizer files were replaced: more tokens than embedding rows, or a
  vocabulary other than the one its bert_jax.json recorded (a table padded larger than
  the vocabulary loads);
and, as sound results: predictions written beside a run's files, twice; a rerun of a
finished fine-tune stopped (Ctrl-C) before it keeps a model leaves the earlier model
and results where they were, and its resumed run moves them to previous/ beside the
earlier logs when it keeps its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.finetune import keeping
from bert_jax.host import outputs
from bert_jax.models import heads
from bert_jax.models.presets import preset
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.weights import pretrained

from helpers import REPO
from helpers.finetune import MICRO_MODEL

FINETUNE = ["finetune", "--config", os.path.join(REPO, "configs", "finetune.py") + ":csv,tiny",
            "--config.model=" + MICRO_MODEL, "--config.max_seq_length=32",
            "--config.global_batch_size=8", "--config.num_train_epochs=1"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny fine-tuned workdir and input files beside it: {name: path}."""
    root = tmp_path_factory.mktemp("no_overwrite")
    rows = ["text,label", "a good film,pos", "a bad film,neg"] * 1
    (root / "train.csv").write_text("\n".join(rows + rows[1:] * 4) + "\n")
    (root / "dev.csv").write_text("\n".join(rows) + "\n")
    (root / "inplace.csv").write_text("text,label,note\na good film,pos,keep me\n")
    (root / "inplace.jsonl").write_text('{"text": "a good film", "id": 7}\n')
    (root / "inplace.txt").write_text("one sentence\nanother one\n")
    (root / "a_file").write_text("not a folder\n")
    (root / "link.csv").symlink_to(root / "inplace.csv")
    workdir = str(root / "run")
    assert cli.main(FINETUNE + ["--workdir", workdir, f"--config.train_file={root}/train.csv",
                                f"--config.validation_file={root}/dev.csv"]) == 0
    return {"root": str(root), "workdir": workdir, "best": os.path.join(workdir, "best")}


def snapshot(path):
    """Every file under `path` with its size and content hash (None: no path)."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return hash(f.read())
    if not os.path.exists(path):
        return None
    return sorted((os.path.relpath(os.path.join(d, n), path), snapshot(os.path.join(d, n)))
                  for d, _, names in os.walk(path) for n in names)


def fill(text, values):
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


CASES = {
    "predict CSV in place": (
        ["predict", "--model", "{workdir}", "--input", "{root}/inplace.csv",
         "--output", "{root}/inplace.csv"],
        "--output {root}/inplace.csv is also --input: writing there would replace what "
        "this command reads; choose another path"),
    "predict JSONL in place, relative spelling": (
        ["predict", "--model", "{workdir}", "--input", "{root}/inplace.jsonl",
         "--output", "{root}/run/../inplace.jsonl"],
        "--output {root}/run/../inplace.jsonl is also --input"),
    "predict through a symlink": (
        ["predict", "--model", "{workdir}", "--input", "{root}/link.csv",
         "--output", "{root}/inplace.csv"],
        "--output {root}/inplace.csv is also --input"),
    "predict onto a model's config": (
        ["predict", "--model", "{workdir}", "--input", "{root}/inplace.txt",
         "--output", "{best}/bert_jax.json"],
        "--output {best}/bert_jax.json is a file of the model folder {best}; writing there "
        "would replace it: choose another path"),
    "predict onto a run's results": (
        ["predict", "--model", "{workdir}", "--input", "{root}/inplace.txt",
         "--output", "{workdir}/eval_results.json"],
        "--output {workdir}/eval_results.json is a file of the fine-tuning folder {workdir}"),
    "predict into a folder": (
        ["predict", "--model", "{workdir}", "--input", "{root}/inplace.txt",
         "--output", "{root}"],
        "--output {root} is a folder; name a file to write"),
    "predict under a file": (
        ["predict", "--model", "{workdir}", "--input", "{root}/inplace.txt",
         "--output", "{root}/a_file/p.jsonl"],
        "--output {root}/a_file/p.jsonl: {root}/a_file is a file, not a folder"),
    "evaluate onto its --file": (
        ["evaluate", "--model", "{workdir}", "--file", "{root}/dev.csv",
         "--output", "{root}/dev.csv"],
        "--output {root}/dev.csv is also --file"),
    "embed text in place": (
        ["embed", "--model", "{workdir}", "--input", "{root}/inplace.txt",
         "--output", "{root}/inplace.txt"],
        "--output {root}/inplace.txt is also --input"),
    "train-tokenizer into a model directory": (
        ["train-tokenizer", "--input", "{root}/inplace.txt", "--vocab_size", "200",
         "--output", "{best}"],
        "--output {best} is a model folder (bert-jax convert/export) whose files this "
        "would replace or mix with; write into a folder of its own"),
    "train-tokenizer into a run folder": (
        ["train-tokenizer", "--input", "{root}/inplace.txt", "--output", "{workdir}"],
        "--output {workdir} is a fine-tuning folder (bert-jax finetune)"),
    "train-tokenizer inside a run folder": (
        ["train-tokenizer", "--input", "{root}/inplace.txt", "--output", "{workdir}/tok"],
        "--output {workdir}/tok lies inside {workdir}, which is a fine-tuning folder"),
    "train-tokenizer around its input": (
        ["train-tokenizer", "--input", "{root}/inplace.txt", "--output", "{root}"],
        "--output {root} holds --input {root}/inplace.txt"),
    "convert onto its own input": (
        ["convert", "--model", "{best}", "--to_hf", "{best}/.", "--overwrite"],
        "--to_hf {best}/. is also --model"),
    "convert around its input": (
        ["convert", "--from_hf", "{best}", "--output", "{root}", "--overwrite"],
        "--output {root} holds --from_hf {best}"),
    "export onto its own input": (
        ["export", "--model", "{best}", "--output", "{best}", "--overwrite"],
        "--output {best} is also --model"),
    "export onto the run it reads": (
        ["export", "--model", "{best}", "--output", "{workdir}", "--overwrite"],
        "--output {workdir} holds --model {best}: writing there could replace what this "
        "command reads; choose another folder"),
    "extend-vocab onto its own model": (
        ["extend-vocab", "--model", "{best}", "--add_tokens", "{root}/inplace.txt",
         "--output", "{best}", "--overwrite"],
        "--output {best} is also --model"),
}


@pytest.mark.parametrize("args, message", list(CASES.values()), ids=list(CASES))
def test_refused_before_any_work_and_nothing_changes(args, message, run, capsys):
    args = [fill(a, run) for a in args]
    before = snapshot(run["root"])
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bert-jax {args[0]}: error: ") and err.count("\n") == 1, err
    assert fill(message, run) in err, err
    assert snapshot(run["root"]) == before


def test_predictions_beside_the_run_may_be_rewritten(run, capsys):
    out = os.path.join(run["workdir"], "mine.jsonl")
    args = ["predict", "--model", run["workdir"], "--input",
            os.path.join(run["root"], "inplace.txt"), "--output", out]
    for _ in range(2):
        assert cli.main(args) == 0
        with open(out) as f:
            assert [json.loads(line)["label"] for line in f] != []


def test_a_folder_output_may_not_hold_a_file_input(tmp_path):
    (tmp_path / "corpus.txt").write_text("x\n")
    with pytest.raises(Exception, match="holds --input"):
        outputs.check_folder("--output", str(tmp_path), {"--input": [
            str(tmp_path / "corpus.txt")]}, None)
    outputs.check_folder("--output", str(tmp_path / "new"),
                         {"--input": [str(tmp_path / "corpus.txt")], "--model": "hf:org/x"},
                         None)


@pytest.mark.parametrize("name", ["pretrain-00000-of-00001.tfrecord", "summary.json",
                                  "options.json"])
def test_create_data_refuses_an_input_it_would_replace(tmp_path, capsys, name):
    """A text input in the output folder under a name create-data writes or removes there
    (a shard's, the summary's) would be read and then lost: refused, the file unchanged."""
    text = tmp_path / name
    text.write_text("In the beginning was the word.\nAnd the word was there.\n\n"
                    "A second document.\nWith two lines.\n", encoding="utf-8")
    before = text.read_bytes()
    assert cli.main(["create-data", "--input", str(text), "--output", str(tmp_path),
                     "--num_workers", "1", "--no_progress"]) == 2
    assert "would be overwritten or removed" in capsys.readouterr().err
    assert text.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [name]


def test_create_data_output_may_not_be_a_file(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text("One sentence.\nAnother one.\n", encoding="utf-8")
    assert cli.main(["create-data", "--input", str(text), "--output", str(text),
                     "--num_workers", "1", "--no_progress"]) == 2
    assert "is a file: the output is a folder" in capsys.readouterr().err
    assert text.read_text(encoding="utf-8") == "One sentence.\nAnother one.\n"


@pytest.mark.long
def test_a_rerun_stopped_before_its_first_model_leaves_the_earlier_one(run, tmp_path,
                                                                       monkeypatch, capsys):
    workdir = str(tmp_path / "rerun")
    shutil.copytree(run["workdir"], workdir)
    earlier = {name: snapshot(os.path.join(workdir, name))
               for name in ("best", "eval_results.json", "metrics.jsonl")}
    args = FINETUNE + ["--workdir", workdir, f"--config.train_file={run['root']}/train.csv",
                       f"--config.validation_file={run['root']}/dev.csv",
                       "--config.num_train_epochs=2"]
    real_keeper = keeping.keeper

    def ctrl_c_at_the_first_keep(*a, **k):  # Ctrl-C as the first epoch ends, before keeping
        return lambda loop: os.kill(os.getpid(), signal.SIGINT)
    monkeypatch.setattr(keeping, "keeper", ctrl_c_at_the_first_keep)
    assert cli.main(args) == 130
    assert "the same command resumes from it" in capsys.readouterr().err
    assert snapshot(os.path.join(workdir, "best")) == earlier["best"]
    assert snapshot(os.path.join(workdir, "eval_results.json")) == earlier["eval_results.json"]
    [aside] = os.listdir(os.path.join(workdir, "previous"))  # the earlier logs only
    aside = os.path.join(workdir, "previous", aside)
    assert sorted(os.listdir(aside)) == ["metrics.jsonl", "tensorboard"]

    monkeypatch.setattr(keeping, "keeper", real_keeper)
    assert cli.main(args) == 0  # resumes; its first kept model moves the earlier one aside
    assert f"its results are moved to {aside}" in capsys.readouterr().err
    assert os.listdir(os.path.join(workdir, "previous")) == [os.path.basename(aside)]
    assert {name: snapshot(os.path.join(aside, name)) for name in earlier} == earlier
    assert snapshot(os.path.join(workdir, "best")) != earlier["best"]
    with open(os.path.join(workdir, "eval_results.json")) as f:
        assert json.load(f)["num_train_epochs"] == 2


def save_model(path, vocab_size):
    """A one-layer model directory with `vocab_size` embedding rows and the bundled
    8,192-token vocabulary."""
    config = preset("tiny", vocab_size=vocab_size, num_hidden_layers=1, hidden_size=32,
                    num_attention_heads=2, intermediate_size=64)
    model = heads.BertForSequenceClassification(config, 2)
    params = model.init(jax.random.key(0), jnp.ones((1, 4), jnp.int32))
    pretrained.save(path, config, jax.tree.map(np.asarray, nn.unbox(params["params"])),
                    tokenizer=load_tokenizer(DEFAULT_VOCAB))
    return path


def test_a_model_with_another_tokenizer_is_refused_when_loaded(tmp_path):
    model = save_model(str(tmp_path / "model"), 8192)
    assert pretrained.load(model).config.vocab_size == 8192
    padded = save_model(str(tmp_path / "padded"), 8256)  # rows past the vocabulary: fine
    assert pretrained.load(padded).params["bert"]["embeddings"]["word_embeddings"][
        "embedding"].shape[0] == 8256
    with open(os.path.join(model, "vocab.txt")) as f:  # replaced by a 200-token one
        tokens = f.read().splitlines()[:200]
    with open(os.path.join(model, "vocab.txt"), "w") as f:
        f.write("\n".join(tokens) + "\n")
    with pytest.raises(UserError, match=f"{model}: the tokenizer in {model} is not the one "
                       "the model was saved with"):
        pretrained.load(model)
    small = save_model(str(tmp_path / "small"), 100)  # 8,192 tokens for 100 rows
    with pytest.raises(UserError, match=f"the tokenizer has 8192 tokens but {small} has "
                       "vocab_size=100"):
        pretrained.load(small)
