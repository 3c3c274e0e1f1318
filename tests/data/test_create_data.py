"""create-data: BERT's masking and NSP rules, measured on the written TFRecords."""
import glob
import gzip
import importlib.util
import json
import os

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.data import cli as data_cli
from bert_jax.data import corpus
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer

from helpers import REPO
from helpers.records import (
    MAX_PRED,
    MAX_SEQ,
    assert_bert_masking,
    assert_whole_words,
    mask_statistics,
    read_records,
)

SHARDS = sorted(glob.glob(corpus.DEFAULT_CORPUS))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("made")
    options = DataOptions(max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED, dupe_factor=3)
    files = cpd.shard_paths(str(out), 2)
    stats = cpd.create_pretraining_data([SHARDS[2], SHARDS[3]], files, DEFAULT_VOCAB, options,
                                        progress=False)
    return stats, read_records(files)


def test_statistics_follow_bert_rules(made):
    stats, rows = made
    tok = load_tokenizer(DEFAULT_VOCAB)
    assert stats.instances == len(rows["input_ids"]) > 4000
    assert_bert_masking(rows, tok)
    assert abs(rows["next_sentence_labels"].mean() - 0.5) < 0.02
    assert abs(stats.summary()["short_target_fraction"] - 0.1) < 0.02
    assert abs(stats.summary()["masked_fraction"] - 0.15) < 0.006


def test_layout_cls_a_sep_b_sep(made):
    _, rows = made
    tok = load_tokenizer(DEFAULT_VOCAB)
    original = rows["input_ids"].copy()
    w = rows["masked_lm_weights"] > 0
    r, c = np.nonzero(w)
    original[r, rows["masked_lm_positions"][r, c]] = rows["masked_lm_ids"][r, c]
    n = rows["input_mask"].sum(1)
    assert (rows["input_mask"] == (np.arange(MAX_SEQ) < n[:, None])).all()
    assert (original[:, 0] == tok.cls_id).all()
    assert ((original == tok.sep_id) & (rows["input_mask"] == 1)).sum(1).tolist() == [2] * len(n)
    assert (original[np.arange(len(n)), n - 1] == tok.sep_id).all()
    first_b = rows["segment_ids"].argmax(1)
    assert (original[np.arange(len(n)), first_b - 1] == tok.sep_id).all()
    assert (rows["segment_ids"].sum(1) == n - first_b).all()
    assert (original[rows["input_mask"] == 0] == 0).all()


def test_whole_word_masking_never_masks_part_of_a_word(tmp_path):
    tok = load_tokenizer(DEFAULT_VOCAB)
    options = DataOptions(whole_word_masking=True, dupe_factor=1)
    files = cpd.shard_paths(str(tmp_path), 1)
    cpd.create_pretraining_data([SHARDS[3]], files, DEFAULT_VOCAB, options, progress=False)
    rows = read_records(files)
    assert (rows["masked_lm_weights"].sum(1) >= 1).all()
    assert_whole_words(rows, tok)
    stats = mask_statistics(rows, tok)
    assert abs(stats["masked_share"] - 0.15) < 0.01


def test_same_output_whatever_the_number_of_workers(tmp_path):
    outputs = []
    for workers in (1, 2):
        files = cpd.shard_paths(str(tmp_path / str(workers)), 3)
        cpd.create_pretraining_data([SHARDS[0], SHARDS[3]], files, DEFAULT_VOCAB,
                                    DataOptions(dupe_factor=1), num_workers=workers,
                                    progress=False)
        outputs.append([open(f, "rb").read() for f in files])
    assert outputs[0] == outputs[1]
    assert all(len(content) > 0 for content in outputs[0])


def test_bad_input_is_counted_not_fatal(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    long_line = " ".join(["word"] * 200)  # over max_seq_length tokens, not split: < 1,024 chars
    body = (b"Only one sentence here.\n\n"
            b"First sentence of a real document.\nA second one with a long line next.\n" +
            long_line.encode() + b"\nAnd a last sentence.\n\n"
            b"Another document starts.\nIt goes on.\nAnd ends.\n")
    with gzip.open(tmp_path / "mixed.txt.gz", "wb") as f:
        f.write(body)
    files = cpd.shard_paths(str(tmp_path / "out"), 1)
    stats = cpd.create_pretraining_data([str(tmp_path / "*.txt*")], files, DEFAULT_VOCAB,
                                        DataOptions(dupe_factor=2), progress=False)
    assert stats.files == 2 and stats.empty_files == 1
    assert stats.documents == 3 and stats.one_sentence_documents == 1
    assert stats.long_sentences == 1
    rows = read_records(files)
    assert len(rows["input_ids"]) == stats.instances > 0


def test_missing_input_or_vocab_fails_at_once(tmp_path, capsys):
    assert cli.main(["create-data", "--input", str(tmp_path / "nope.txt"), "--output",
                     str(tmp_path)]) == 2
    assert "input file not found" in capsys.readouterr().err
    (tmp_path / "a.txt").write_text("One.\nTwo.\n")
    assert cli.main(["create-data", "--input", str(tmp_path / "a.txt"), "--output",
                     str(tmp_path), "--tokenizer", str(tmp_path / "vocab.txt")]) == 2
    assert "not found" in capsys.readouterr().err


def test_cli_writes_shards_and_summary(tmp_path):
    out = tmp_path / "out"
    assert data_cli.create_data_main(["--input", SHARDS[3], "--output", str(out), "--num_shards",
                                      "2", "--dupe_factor", "1", "--dynamic_masking",
                                      "--num_workers", "1", "--no_progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["instances"] > 0 and summary["masked_tokens"] == 0
    rows = read_records(sorted(glob.glob(str(out / "*.tfrecord"))))
    assert len(rows["input_ids"]) == summary["instances"]
    assert not rows["masked_lm_weights"].any()


def test_original_tool_flags(tmp_path):
    outputs = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    spec = importlib.util.spec_from_file_location(
        "original_tool", os.path.join(REPO, "tools", "create_pretraining_data.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main([
        f"--input_file={SHARDS[3]}", f"--output_file={','.join(outputs)}",
        f"--vocab_file={DEFAULT_VOCAB}/vocab.txt", "--do_lower_case=True",
        "--do_whole_word_mask=False", "--max_seq_length=64", "--max_predictions_per_seq=10",
        "--random_seed=7", "--dupe_factor=1", "--masked_lm_prob=0.15", "--short_seq_prob=0.1"]) == 0
    rows = read_records(outputs, 64, 10)
    assert rows["input_ids"].shape[1] == 64 and rows["masked_lm_weights"].sum() > 0


def test_sentencepiece_whole_word_masking(tmp_path):
    assert data_cli.train_tokenizer_main(["--input", SHARDS[3], "--vocab_size", "1500", "--type",
                                          "unigram", "--output", str(tmp_path / "spm")]) == 0
    tok = load_tokenizer(str(tmp_path / "spm"))
    files = cpd.shard_paths(str(tmp_path / "out"), 1)
    cpd.create_pretraining_data([SHARDS[3]], files, str(tmp_path / "spm"),
                                DataOptions(whole_word_masking=True, dupe_factor=1),
                                progress=False)
    rows = read_records(files)
    assert_whole_words(rows, tok)
    assert abs(mask_statistics(rows, tok)["masked_share"] - 0.15) < 0.01


def test_examples_from_texts():
    tok = load_tokenizer(DEFAULT_VOCAB)
    documents = [["In the beginning God created the heaven and the earth.",
                  "And the earth was without form, and void."],
                 ["We the people.", "Of the United States.", "In order to form a union."]]
    rows = cpd.examples_from_texts(documents, tok, DataOptions(max_seq_length=32,
                                                               max_predictions_per_seq=5,
                                                               dupe_factor=20))
    assert rows["input_ids"].shape[1] == 32 and rows["masked_lm_ids"].shape[1] == 5
    assert rows["input_ids"].dtype == np.int32 and rows["masked_lm_weights"].dtype == np.float32
    assert (rows["input_ids"][:, 0] == tok.cls_id).all() and rows["masked_lm_weights"].sum() > 0
    assert 0 < rows["next_sentence_labels"].mean() < 1
