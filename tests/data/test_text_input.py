"""Text that is not in BERT's format as written: a named encoding (`--encoding`) and a
corpus on one long line (issue 44). Speeds: docs/results.md."""
import glob
import gzip
import json
import os
import subprocess
import sys

import pytest

from bert_jax import cli
from bert_jax.data import corpus

from helpers import REPO


def _sentences(count):
    with gzip.open(sorted(glob.glob(corpus.DEFAULT_CORPUS))[0], "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    return [line if line[-1] in ".!?" else line + "." for line in lines[:count]]


def _create(path, out, *flags):
    return cli.main(["create-data", "--input", str(path), "--output", str(out), "--dupe_factor",
                     "1", "--num_workers", "1", "--num_shards", "1", "--no_progress", *flags])


def test_a_corpus_on_one_line_is_split_into_sentences_and_kept(tmp_path, capsys, caplog):
    text = _sentences(200)
    (tmp_path / "lines.txt").write_text("\n".join(text) + "\n")
    (tmp_path / "one.txt").write_text(" ".join(text))  # no newline at all
    kept = {}
    for name in ("lines", "one"):
        assert _create(tmp_path / f"{name}.txt", tmp_path / name) == 0
        with open(tmp_path / name / "summary.json") as f:
            kept[name] = json.load(f)
    assert kept["lines"]["split_lines"] == 0 and kept["one"]["split_lines"] == 1
    assert kept["one"]["split_line_pieces"] >= 150
    # The old code kept one truncated row per dupe; now nearly every token stays.
    assert kept["one"]["tokens"] > 0.9 * kept["lines"]["tokens"]
    assert "1 line(s) longer than 1024 characters were split into " in caplog.text
    # The raw counts go to summary.json; the printed summary stays short.
    assert "split_lines" not in capsys.readouterr().out


def test_split_long_line_cuts_at_sentences_then_spaces_then_characters():
    line = "One two three. Four five six! " + "word " * 40 + "\u4e2d" * 50 + "\u3002\u597d"
    pieces = corpus.split_long_line(line, 20)
    assert pieces[:2] == ["One two three.", "Four five six!"]
    assert all(len(p) <= 20 for p in pieces) and "word word" in pieces[2]
    assert "".join(pieces).replace(" ", "") == line.replace(" ", "")  # nothing lost
    assert pieces[-1] == "\u597d"


def test_latin1_text_is_read_when_its_encoding_is_named(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Un caf\xe9 au lait.\nLa na\xefve r\xe9ponse.\n\nDeux.\nTrois.\n"
                     .encode("latin-1"))
    assert list(corpus.iter_lines(str(path), corpus.ReadStats(), "latin-1"))[:2] == \
        ["Un café au lait.", "La naïve réponse."]
    with pytest.raises(ValueError, match="not UTF-8 text"):  # the default still refuses
        list(corpus.iter_lines(str(path), corpus.ReadStats()))
    assert _create(path, tmp_path / "out", "--encoding", "latin-1") == 0
    with open(tmp_path / "out" / "summary.json") as f:
        assert json.load(f)["unknown_tokens"] == 0
    with open(tmp_path / "out" / "options.json") as f:
        assert json.load(f)["encoding"] == "latin-1"


def test_an_unknown_encoding_is_one_line(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("text\n")
    assert _create(tmp_path / "a.txt", tmp_path / "out", "--encoding", "klingon") == 2
    assert capsys.readouterr().err == ("bert-jax create-data: error: unknown encoding 'klingon': "
                                       "use a Python codec name such as utf-8, latin-1, cp1252, "
                                       "utf-16\n")
    assert not os.path.exists(tmp_path / "out")


def test_tokenize_reads_latin1_when_named():
    outputs = []
    for codec, flags in (("latin-1", ["--encoding", "latin-1"]), ("utf-8", [])):
        result = subprocess.run([sys.executable, "-m", "bert_jax.cli", "tokenize", *flags],
                                input="un caf\xe9\n".encode(codec), capture_output=True,
                                env={**os.environ, "PYTHONPATH": REPO}, timeout=120)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout.decode())
    assert outputs[0] == outputs[1] and "##" in outputs[0]  # café: c ##af ##e
