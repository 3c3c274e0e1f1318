"""Corrupt and meaningless inputs (issue 58, item 3), through `bert-jax` itself: each
refused case ends with exit code 2 and one line `bert-jax COMMAND: error: ...` naming the
value (or file) and what to do, before any output is written (the output path still does
not exist afterwards); each tolerated one gives a sound result and one warning.
tests/properties/test_bad_input.py holds the earlier rounds' cases; this file adds the classes
below.

Inputs gone through, as classes (E: refused, W: a warning and a sound result, =: already
handled elsewhere, named):
- model parameters: NaN/Inf in any parameter (a flipped byte that decompression does not
  notice, a diverged run) E wherever a model is loaded for use: `pretrained.ModelRef.load`
  (embed, predict, evaluate, export, convert --to_hf, distill, extend-vocab, fine-tuning's
  and pretraining's init_from) and converting from HF or TF1. One line: the path, the
  count and the parameter. (Export had the only check before; it now shares this one.)
- vocabularies: a duplicate token W (the existing warning names the lines). Decided: every
  reader agrees on its LAST id, as Google's BERT (`load_vocab` fills a dict line by line)
  and transformers' slow and fast BertTokenizer read it; so a model converted from either,
  or exported with `convert --to_hf`, tokenizes the same everywhere. tensorflow-text (the
  SavedModel export) refuses repeated tokens, so it gets the never-read earlier ids under
  names no text matches. Refusing instead would lock out published vocabularies that have
  repeats. Missing special tokens, non-UTF-8 = (test_bad_input, test_tokenization).
- tokenizer sizes: train-tokenizer --vocab_size 0 E; a WordPiece size with no room beside
  the 100 reserved tokens E (it wrote a 3-token vocabulary without [SEP] before);
  SentencePiece sizes the text cannot fill, or too small for its characters E (an internal
  error before); a size the text fills less than half W. A tokenizer larger than the
  model's embeddings = (test_bad_input: pretrain, embed, export).
- data files: an embed input of blank lines only E (predict's = test_bad_input); an
  extend-vocab token file with no token E (it wrote a copy of the model). Empty, missing,
  Latin-1, truncated gzip, TFRecords given as text = (test_bad_input).
- batch sizes: fine-tuning's global_batch_size not a multiple of the batch shards E (it
  trained 16 and recorded 12 on 8 devices; pretraining refused already); create-data
  --num_shards 0 (an internal error before), --num_workers 0 E; zero/negative = .
- probabilities: masked_lm_prob 0 E in the pretraining config and create-data (it still
  masked one token a row), above 1 E; create-data --short_seq_prob outside [0, 1] E.
- counts and lengths: create-data --dupe_factor 0 E (it blamed the input before),
  --max_predictions_per_seq 0 E (rows without targets); embed --max_seq_length 0 E (it read
  as "not given" and ran at 128), embed --max_seq_length past the model's positions W (it
  was cut there silently); lengths past the positions elsewhere, too short = .
- column, key and label choices: unknown text column, blank label, test label unseen in
  training, unknown split = (test_bad_input); one label in the whole training set W (there).
"""

from __future__ import annotations

import logging
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.models import heads
from bert_jax.models.presets import preset
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer, wordpiece
from bert_jax.weights import pretrained

from helpers import REPO
from helpers.finetune import CONFIG, MICRO_MODEL
from helpers.words import assert_failure_line

CREATE = ["create-data", "--input", "{texts}", "--output", "{new}", "--no_progress"]
NAN_LINE = "{nan_model}: 3 NaN/Inf values in parameter bert/embeddings/word_embeddings/embedding"

CASES = {
    # parameters that are not numbers: every command that loads the model
    "embed NaN parameters": (["embed", "--model", "{nan_model}", "--input", "{texts}",
                              "--output", "{new}.npy"], NAN_LINE),
    "convert --to_hf NaN parameters": (["convert", "--model", "{nan_model}", "--to_hf",
                                        "{new}"], NAN_LINE),
    "export NaN parameters": (["export", "--model", "{nan_model}", "--output", "{new}"],
                              NAN_LINE),
    "predict NaN parameters": (["predict", "--model", "{nan_model}", "--input", "{texts}",
                                "--output", "{new}.jsonl"], NAN_LINE),
    "extend-vocab NaN parameters": (["extend-vocab", "--model", "{nan_model}", "--add_tokens",
                                     "{texts}", "--output", "{new}"], NAN_LINE),
    # batch sizes the mesh would change
    "finetune batch the 8 devices round up": (
        ["finetune", "--config", CONFIG + ":csv,tiny", "--workdir", "{new}",
         f"--config.model={MICRO_MODEL}", "--config.max_seq_length=32",
         "--config.global_batch_size=12", "--config.train_file={train}",
         "--config.validation_file={train}"],
        "global_batch_size 12 is not a multiple of grad_accum_steps 1 x 8 batch shards: set "
        "--config.global_batch_size=16"),
    # probabilities
    "pretrain masked_lm_prob 0": (
        ["pretrain", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
         "--workdir", "{new}", "--config.masked_lm_prob=0"],
        "masked_lm_prob must be a number > 0, got 0"),
    "create-data masked_lm_prob 0": (CREATE + ["--masked_lm_prob", "0"],
                                     "--masked_lm_prob must be in (0, 1], got 0.0"),
    "create-data masked_lm_prob above 1": (CREATE + ["--masked_lm_prob", "1.5"],
                                           "--masked_lm_prob must be in (0, 1], got 1.5"),
    "create-data short_seq_prob above 1": (CREATE + ["--short_seq_prob", "2"],
                                           "--short_seq_prob must be in [0, 1], got 2.0"),
    # counts
    "create-data dupe_factor 0": (CREATE + ["--dupe_factor", "0"],
                                  "--dupe_factor must be an integer >= 1, got 0"),
    "create-data no predictions": (CREATE + ["--max_predictions_per_seq", "0"],
                                   "--max_predictions_per_seq must be an integer >= 1, got 0"),
    "create-data no shards": (CREATE + ["--num_shards", "0"],
                              "--num_shards must be an integer >= 1, got 0"),
    "create-data no workers": (CREATE + ["--num_workers", "0"],
                               "--num_workers must be an integer >= 1, got 0"),
    "embed length 0": (["embed", "--model", "{model}", "--input", "{texts}", "--output",
                        "{new}.npy", "--max_seq_length", "0"],
                       "--max_seq_length must be at least 3 ([CLS] text [SEP]), got 0"),
    # tokenizer sizes
    "train-tokenizer size 0": (["train-tokenizer", "--input", "{texts}", "--vocab_size", "0",
                                "--output", "{new}"],
                               "--vocab_size must be an integer >= 1, got 0"),
    "train-tokenizer no room beside the reserved tokens": (
        ["train-tokenizer", "--input", "{texts}", "--vocab_size", "100", "--output", "{new}"],
        "--vocab_size 100 leaves no room for pieces learned from the text beside the 5 special "
        "tokens and 95 [unused] slots"),
    "train-tokenizer BPE smaller than the characters": (
        ["train-tokenizer", "--type", "bpe", "--input", "{texts}", "--vocab_size", "3",
         "--output", "{new}"],
        "--vocab_size 3 does not fit this text (Vocabulary size is smaller than required_chars"),
    "train-tokenizer unigram larger than the text": (
        ["train-tokenizer", "--type", "unigram", "--input", "{texts}", "--vocab_size", "100000",
         "--output", "{new}"],
        "--vocab_size 100000 does not fit this text (Vocabulary size too high (100000)"),
    # files without content
    "embed blank lines only": (["embed", "--model", "{model}", "--input", "{blank}",
                                "--output", "{new}.npy"],
                               "{blank} holds blank lines only: nothing to embed"),
    "extend-vocab no tokens": (["extend-vocab", "--model", "{model}", "--add_tokens", "{blank}",
                                "--output", "{new}"],
                               "{blank} holds no tokens (empty, or blank lines only): nothing "
                               "to add"),
}


def fill(text: str, values: dict) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


def save_model(path: str, poison: int = 0, task=None) -> str:
    """A one-layer sequence classifier over the bundled vocabulary; `poison` word-embedding
    values set to NaN/Inf (as a flipped byte in params/ makes them)."""
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    config = preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=1,
                    hidden_size=32, num_attention_heads=2, intermediate_size=64)
    params = nn.unbox(heads.BertForSequenceClassification(config, 2).init(
        jax.random.key(0), jnp.ones((1, 4), jnp.int32))["params"])
    params = jax.tree.map(np.array, params)
    table = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    table.flat[:poison] = [np.nan, np.inf, -np.inf][:poison]
    pretrained.save(path, config, params, tokenizer=tokenizer, task=task)
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("degenerate")
    (root / "texts.txt").write_text("The cat sat on the mat. It was happy.\nDogs bark.\n\n"
                                    "A second document. It has two lines.\nOne more.\n")
    (root / "blank.txt").write_text("\n  \n\t\n")
    (root / "train.tsv").write_text("text\tlabel\n" + "a good film\tpos\na bad film\tneg\n" * 4)
    task = {"name": "csv", "family": "classification", "num_labels": 2,
            "label_names": ["neg", "pos"]}
    return {"texts": str(root / "texts.txt"), "blank": str(root / "blank.txt"),
            "train": str(root / "train.tsv"), "model": save_model(str(root / "model")),
            "nan_model": save_model(str(root / "nan_model"), poison=3, task=task)}


@pytest.mark.parametrize("args, message", list(CASES.values()), ids=list(CASES))
def test_degenerate_input_gets_one_line_and_writes_nothing(args, message, inputs, tmp_path,
                                                           capsys):
    values = {**inputs, "new": str(tmp_path / "new")}
    args = [fill(a, values) for a in args]
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert_failure_line(err, args[0])
    assert fill(message, values) in err, err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def test_a_model_holding_nan_is_refused_by_the_one_loader(inputs):
    """pretrained.load is what predict, evaluate, distill and init_from read through."""
    with pytest.raises(pretrained.NonFiniteParamsError, match="3 NaN/Inf values"):
        pretrained.load(inputs["nan_model"])
    assert pretrained.load(inputs["model"]).config.vocab_size == 8192
    # What conversion from HF or TF1 checks: bfloat16 weights too, integer leaves skipped.
    weights = {"a": np.array([1, np.nan, np.inf], jnp.bfloat16), "b": {"c": np.ones(2)},
               "steps": np.array([3])}
    with pytest.raises(pretrained.NonFiniteParamsError,
                       match=r"^hf_dir: 2 NaN/Inf values in parameter a: the file is corrupt"):
        pretrained.check_finite(weights, "hf_dir")
    weights["b"]["c"][0] = np.nan
    with pytest.raises(pretrained.NonFiniteParamsError, match=r"\(and 1 more parameters\)"):
        pretrained.check_finite(weights, "hf_dir")


def test_duplicate_vocabulary_tokens_mean_the_same_id_in_every_reader(tmp_path, caplog):
    """bert_jax, transformers' slow and fast BertTokenizer (what `convert --to_hf` hands
    on) and tensorflow-text (the SavedModel export) give the same ids: a repeated token's
    last one."""
    import tensorflow as tf
    from transformers import BertTokenizer, BertTokenizerFast

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nfilm\nthe\n##s\n##s\n")
    with caplog.at_level(logging.WARNING):
        tokenizer = wordpiece.WordPieceTokenizer.from_file(str(vocab))
    assert "has 2 duplicate token(s) ('the' at lines 6 and 8; '##s' at lines 9 and 10): " \
           "each is only ever read as its last id" in caplog.text
    text = "the films the"
    ours = tokenizer.encode(text).ids
    assert ours == [7, 6, 9, 7]
    hf_ids = [BertTokenizer(str(vocab))(text)["input_ids"][1:-1],
              BertTokenizerFast(str(vocab))(text)["input_ids"][1:-1]]
    assert hf_ids == [ours, ours]
    tf_ids = tokenizer.tf_tokenize(tf.constant([text])).to_list()[0]
    assert tf_ids == ours


def test_a_vocabulary_the_text_cannot_fill_is_written_with_a_warning(inputs, tmp_path, caplog,
                                                                     capsys):
    out = str(tmp_path / "tok")
    with caplog.at_level(logging.WARNING):
        assert cli.main(["train-tokenizer", "--input", inputs["texts"], "--vocab_size", "1000",
                         "--output", out]) == 0
    assert "pieces were learned from the text; " in caplog.text
    assert "of --vocab_size 1000 are extra [unused] slots: give more text or a smaller " \
           "--vocab_size" in caplog.text
    assert load_tokenizer(out).vocab_size == 1000


def test_create_data_still_takes_sound_probabilities(inputs, tmp_path, capsys):
    """The bounds are inclusive where they should be: masking every token, no short rows."""
    out = str(tmp_path / "records")
    assert cli.main(fill(" ".join(CREATE), {**inputs, "new": out}).split() + [
        "--masked_lm_prob", "1", "--short_seq_prob", "0", "--num_workers", "1",
        "--max_seq_length", "16"]) == 0
    assert any(name.endswith(".tfrecord") for name in os.listdir(out))


def test_embed_keeps_a_blank_line_as_a_row_and_says_where_it_cuts(inputs, tmp_path, capsys,
                                                                   caplog):
    """A blank line among text is an input (rows match lines); only an all-blank file is
    refused. A length past the model's positions runs at the positions, with a warning."""
    source = tmp_path / "mixed.txt"
    source.write_text("one line\n\nanother\n")
    out = str(tmp_path / "vectors.npy")
    with caplog.at_level(logging.WARNING):
        assert cli.main(["embed", "--model", inputs["model"], "--input", str(source),
                         "--output", out, "--max_seq_length", "1000"]) == 0
    assert np.load(out).shape == (3, 32)
    assert "--max_seq_length 1000 exceeds the model's 512 positions: inputs are cut at 512 " \
           "tokens" in caplog.text
