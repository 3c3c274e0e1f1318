"""What a failure prints, by whose it is (`bert_jax.cli.main`, `bert_jax.errors`): a bug
inside a command's computation, a ValueError or KeyError too, is an internal error (exit 1,
one line naming the file that holds its traceback); a UserError and a missing input file
are the user's (exit 2, one line). The same for tools/create_pretraining_data.py."""

from __future__ import annotations

import importlib.util
import logging
import os

import jax
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.data import instances
from bert_jax.errors import UserError
from bert_jax.tokenization import DEFAULT_VOCAB

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = "\n".join(f"sentence number {i} of the first document." for i in range(8)) + "\n\n" + \
    "\n".join(f"line {i} of another document here." for i in range(8)) + "\n"


def _traceback_file(err: str) -> str:
    """The file an internal error's line names (its last word); checked to exist."""
    assert err.count("\n") == 1, err
    path = err.rsplit(" ", 1)[1].strip()
    assert os.path.isfile(path), err
    return path


def _assert_internal_error(err: str, prefix: str, error: BaseException) -> None:
    assert err.startswith(f"{prefix}: internal error (a bug, please report it): "
                          f"{type(error).__name__}: "), err
    assert "; full traceback in " in err, err
    path = _traceback_file(err)
    text = open(path, encoding="utf-8").read()
    os.remove(path)
    assert text.startswith("Traceback (most recent call last):") and "_broken" in text, text
    assert f"{type(error).__name__}: {str(error)}" in text, text


def _raises(error: BaseException):
    def _broken(*args, **kwargs):
        raise error
    return _broken


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return str(path)


def _create_data(text_file: str, out) -> list[str]:
    return ["create-data", "--input", text_file, "--output", str(out), "--num_shards", "1",
            "--num_workers", "1", "--dupe_factor", "1", "--max_seq_length", "32",
            "--no_progress"]


BUGS = {"ValueError": lambda: ValueError("operands could not be broadcast together with "
                                         "shapes (2,3) (4,)"),
        "KeyError": lambda: KeyError("masked_lm_positions")}


@pytest.mark.parametrize("bug", BUGS)
def test_a_bug_in_create_data_is_an_internal_error(text_file, tmp_path, monkeypatch, capsys,
                                                   bug):
    error = BUGS[bug]()
    monkeypatch.setattr(instances, "instances_from_document", _raises(error))
    assert cli.main(_create_data(text_file, tmp_path / "out")) == 1
    _assert_internal_error(capsys.readouterr().err, "bert-jax create-data", error)
    assert not list((tmp_path / "out").glob("*.tfrecord"))


def test_a_bug_in_embed_pooling_is_an_internal_error(tmp_path, monkeypatch, capsys):
    import flax.linen as nn

    from bert_jax.models.config import BertConfig
    from bert_jax.models.encoder import BertModel
    from bert_jax.serve import embed
    from bert_jax.tokenization import load_tokenizer
    from bert_jax.weights import pretrained

    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    params = nn.unbox(BertModel(config).init(jax.random.key(0), np.zeros((1, 4), np.int32)))
    pretrained.save(tmp_path / "model", config, {"bert": params["params"]}, tokenizer=tokenizer)
    (tmp_path / "texts.txt").write_text("a short line\nanother one\n", encoding="utf-8")
    error = BUGS["ValueError"]()
    monkeypatch.setattr(embed, "mean_pool", _raises(error))
    assert cli.main(["embed", "--model", str(tmp_path / "model"), "--input",
                     str(tmp_path / "texts.txt"), "--output", str(tmp_path / "v.npy"),
                     "--pooling", "mean", "--max_seq_length", "16"]) == 1
    _assert_internal_error(capsys.readouterr().err, "bert-jax embed", error)
    assert not (tmp_path / "v.npy").exists()


def test_a_user_error_is_one_line_with_exit_2(text_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(instances, "instances_from_document",
                        _raises(UserError("a document the user can fix")))
    assert cli.main(_create_data(text_file, tmp_path / "out")) == 2
    assert capsys.readouterr().err == "bert-jax create-data: error: a document the user can fix\n"


def test_a_missing_input_file_is_one_line_with_exit_2(tmp_path, capsys):
    missing = str(tmp_path / "nope.txt")
    assert cli.main(_create_data(missing, tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-jax create-data: error: ") and missing in err, err
    assert err.count("\n") == 1 and "internal error" not in err, err


def _offline():
    """A bucket client's failure with no network, as gcsfs raises it (aiohttp's OSError)."""
    from aiohttp.client_exceptions import ClientOSError
    return ClientOSError(-2, "Cannot connect to host storage.googleapis.com:443 "
                             "[Name or service not known]")


@pytest.mark.parametrize("error", [_offline, lambda: ConnectionRefusedError(111, "refused")],
                         ids=["bucket_offline", "refused"])
def test_a_host_out_of_reach_is_the_users_to_fix(text_file, monkeypatch, capsys, error):
    """Not a bug: one line saying what could not be reached, exit 2 (and no gcsfs log)."""
    from bert_jax.host import paths
    monkeypatch.setattr(paths, "exists", _raises(error()))
    assert cli.main(_create_data(text_file, "gs://bucket/data")) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-jax create-data: error: cannot reach the network: "), err
    assert err.count("\n") == 1 and "internal error" not in err, err
    assert logging.getLogger("gcsfs").getEffectiveLevel() > logging.ERROR


@pytest.fixture(scope="module")
def tool():
    """tools/create_pretraining_data.py, Google's flags over `bert_jax.data.cli`."""
    spec = importlib.util.spec_from_file_location(
        "original_tool", os.path.join(REPO, "tools", "create_pretraining_data.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _last_line(err: str) -> str:
    return err.splitlines()[-1] + "\n" if err else err


def _tool_args(text_file: str, tmp_path) -> list[str]:
    return [f"--input_file={text_file}", f"--output_file={tmp_path / 'a.tfrecord'}",
            f"--vocab_file={DEFAULT_VOCAB}/vocab.txt", "--max_seq_length=32",
            "--dupe_factor=1"]


@pytest.mark.parametrize("bug", BUGS)
def test_the_original_tool_reports_a_bug_as_internal(tool, text_file, tmp_path, monkeypatch,
                                                     capsys, bug):
    error = BUGS[bug]()
    monkeypatch.setattr(instances, "instances_from_document", _raises(error))
    assert tool.main(_tool_args(text_file, tmp_path)) == 1
    err = _last_line(capsys.readouterr().err)  # after the progress bar
    _assert_internal_error(err, err.split(": internal error", 1)[0], error)
    assert not (tmp_path / "a.tfrecord").exists()


def test_the_original_tool_reports_a_user_error_in_one_line(tool, text_file, tmp_path,
                                                            monkeypatch, capsys):
    monkeypatch.setattr(instances, "instances_from_document",
                        _raises(UserError("a document the user can fix")))
    assert tool.main(_tool_args(text_file, tmp_path)) == 2
    err = _last_line(capsys.readouterr().err)
    assert err.endswith(": error: a document the user can fix\n") and err.count("\n") == 1, err


def test_the_original_tool_names_a_missing_input_file(tool, tmp_path, capsys):
    missing = str(tmp_path / "nope.txt")
    assert tool.main(_tool_args(missing, tmp_path)) == 2
    err = _last_line(capsys.readouterr().err)
    assert ": error: " in err and missing in err and "internal error" not in err, err
    assert err.count("\n") == 1, err


def test_files_that_are_not_json_or_not_utf8_are_the_users_to_fix(text_file, tmp_path,
                                                                  capsys):
    """Converted where they enter our code: a tokenizer's or a model's settings that are
    not JSON, an entity list that is not UTF-8."""
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nword\n")
    (tokenizer / "tokenizer_config.json").write_text("{not json")
    assert cli.main(["tokenize", "--tokenizer", str(tokenizer)]) == 2
    assert capsys.readouterr().err == (
        f"bert-jax tokenize: error: {tokenizer}/tokenizer_config.json:1: not valid JSON "
        "(Expecting property name enclosed in double quotes)\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "bert_jax.json").write_text("{not json")
    assert cli.main(["embed", "--model", str(tmp_path / "model"), "--input", text_file,
                     "--output", str(tmp_path / "v.npy")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-jax embed: error: ") and "bert_jax.json:1: not valid JSON" in err
    (tmp_path / "entities.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    assert cli.main(_create_data(text_file, tmp_path / "out") + [
        "--knowledge_masking", "entity", "--entity_file", str(tmp_path / "entities.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bert-jax create-data: error: {tmp_path / 'entities.txt'}:1: not "
                          "UTF-8 text (byte 0xe9 at offset 3)"), err


def test_a_reader_that_stops_reading_is_not_a_bug(tmp_path):
    """`bert-jax tokenize < big.txt | head -1`: once the pipe's reader is gone, the command
    stops without a word (no 'internal error', no traceback file) and exits with 141, a
    shell's code for SIGPIPE."""
    import subprocess
    import sys

    big = tmp_path / "big.txt"
    big.write_text("the cat sat on the mat\n" * 200_000)
    with open(big, "rb") as stdin:
        process = subprocess.Popen([sys.executable, "-m", "bert_jax.cli", "tokenize",
                                    "--tokenizer", DEFAULT_VOCAB], stdin=stdin,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout.readline()
        process.stdout.close()
        assert process.wait(timeout=120) == 141
    assert process.stderr.read().decode() == ""
