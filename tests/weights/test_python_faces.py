"""The Python functions docs/python_api.md and docs/nnx.md show check their arguments as the
commands do (issue 66): a bad count, token id or length raises `bert_jax.errors.UserError` in
one line in the commands' words, before JAX computes NaN or fails on its own.

The functions: `bert_jax.weights.nnx.nnx_module` and the module it returns,
`bert_jax.serve.embed.embed_texts`, `token_features` and `encode_texts`."""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import pytest
from flax import nnx

from bert_jax.errors import UserError, check_ids
from bert_jax.models.config import BertConfig
from bert_jax.models.heads import BertForPreTraining
from bert_jax.serve import embed
from bert_jax.tokenization import WordPieceTokenizer, load_tokenizer
from bert_jax.weights import nnx as bert_nnx
from bert_jax.weights import pretrained

CONFIG = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=64)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
IDS = np.full((2, 8), 7, np.int32)
MASK = np.ones_like(IDS)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A small pretraining model (encoder with pooler) on disk, zero weights."""
    path = tmp_path_factory.mktemp("faces") / "model"
    shapes = nn.unbox(jax.eval_shape(BertForPreTraining(CONFIG).init, jax.random.key(0),
                                     IDS, MASK))["params"]
    params = jax.tree.map(lambda s: np.zeros(s.shape, np.float32), shapes)
    pretrained.save(path, CONFIG, params, tokenizer=WordPieceTokenizer(VOCAB))
    return path


@pytest.fixture(scope="module")
def encoder(model_dir):
    return bert_nnx.nnx_module(model_dir)


def one_line_error(call, *needles):
    with pytest.raises(UserError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


@pytest.mark.parametrize("kwargs, needles", [
    ({"num_labels": 0}, ["num_labels must be an integer >= 1, got 0"]),
    ({"num_labels": -2}, ["num_labels must be an integer >= 1, got -2"]),
    ({"num_labels": 2.5}, ["num_labels must be an integer >= 1, got 2.5"]),
    ({"num_labels": True}, ["num_labels must be an integer >= 1, got True"]),
    ({"num_labels": 2, "pooling": "max"}, ["pooling must be one of pooler, mean"]),
    ({"pooling": "mean"}, ["give num_labels"]),
    ({"seed": 1.5}, ["seed must be an integer"]),
])
def test_nnx_module_refuses_bad_counts(model_dir, kwargs, needles):
    """Cases: num_labels 0, negative, fractional or a bool; an unknown pooling; pooling
    without num_labels (the encoder has no head to pool for); a fractional seed."""
    one_line_error(lambda: bert_nnx.nnx_module(model_dir, **kwargs), *needles)


def test_the_nnx_module_checks_its_inputs(model_dir, encoder):
    """Cases for a call on host arrays: a token id past the vocabulary and a negative one
    (NaN without the check), a row longer than max_position_embeddings, ids of one dimension,
    a segment id past type_vocab_size, float ids; under nnx.jit the row length is still
    checked (shapes are known) and good ids give finite outputs; a classifier checks too."""
    past = IDS.copy()
    past[1, 3] = CONFIG.vocab_size
    one_line_error(lambda: encoder(past, MASK), "input_ids holds id 64",
                   "vocab_size=64", str(model_dir), "would read no embedding")
    one_line_error(lambda: encoder(-IDS, MASK), "input_ids holds id -7")
    long = np.full((1, CONFIG.max_position_embeddings + 1), 7)
    one_line_error(lambda: encoder(long), "max_seq_length 65 exceeds the "
                   "max_position_embeddings 64")
    one_line_error(lambda: encoder(IDS[0]), "[batch, length]", "(8,)")
    one_line_error(lambda: encoder(IDS, MASK, np.full_like(IDS, 2)),
                   "segment_ids holds id 2", "type_vocab_size=2")
    one_line_error(lambda: encoder(IDS.astype(np.float32)), "integer ids")
    jitted = nnx.jit(lambda module, ids: module(ids).sequence_output)
    one_line_error(lambda: jitted(encoder, long), "max_seq_length 65")
    assert np.isfinite(np.asarray(jitted(encoder, IDS))).all()
    classifier = bert_nnx.nnx_module(pretrained.load(model_dir), num_labels=2)
    one_line_error(lambda: classifier(past, MASK), "input_ids holds id 64")


@pytest.mark.parametrize("kwargs, needles", [
    ({"batch_size": 0}, ["--batch_size must be an integer >= 1, got 0"]),
    ({"batch_size": -1}, ["--batch_size must be an integer >= 1, got -1"]),
    ({"batch_size": 2.5}, ["--batch_size must be an integer >= 1, got 2.5"]),
    ({"max_seq_length": 2}, ["--max_seq_length must be at least 3"]),
    ({"max_seq_length": 16.5}, ["--max_seq_length must be at least 3", "16.5"]),
    ({"layer": 1.5}, ["--layer takes integers"]),
    ({"layer": 9}, ["--layer 9 is out of range"]),
    ({"pooling": "sum"}, ["unknown pooling 'sum'"]),
    ({"texts": "w1 w2"}, ["texts must be a list of strings, got one str"]),
    ({"texts": ["w1", None]}, ["texts must be a list of strings, got an item None"]),
])
def test_embed_texts_refuses_bad_arguments(model_dir, kwargs, needles):
    """Cases: batch_size 0, negative or fractional; max_seq_length below [CLS] text [SEP] or
    fractional; a fractional or out-of-range layer; an unknown pooling; one str instead of a
    list of texts; a list holding a non-string."""
    model = pretrained.load(model_dir)
    texts = kwargs.pop("texts", ["w1 w2", "w3"])
    one_line_error(lambda: embed.embed_texts(model, texts, **kwargs), *needles)


@pytest.mark.parametrize("kwargs, needles", [
    ({"batch_size": 0}, ["--batch_size must be an integer >= 1, got 0"]),
    ({"max_seq_length": 1}, ["--max_seq_length must be at least 3"]),
    ({"layers": -1}, ["--layers takes a list of layers, got -1"]),
    ({"layers": [-1, 0.5]}, ["--layers takes integers"]),
    ({"layers": []}, ["--layers names no layer"]),
    ({"combine": "max"}, ["unknown --combine 'max'"]),
    ({"texts": "w1"}, ["texts must be a list of strings"]),
])
def test_token_features_refuses_bad_arguments(model_dir, kwargs, needles):
    """Cases: batch_size 0; max_seq_length 1; layers one int, holding a fraction, or empty;
    an unknown combine; one str instead of a list of texts."""
    model = pretrained.load(model_dir)
    texts = kwargs.pop("texts", ["w1 w2", "w3"])
    one_line_error(lambda: embed.token_features(model, texts, **kwargs), *needles)


def test_encode_texts_refuses_rows_too_short_and_a_str(model_dir):
    """Cases: max_seq_length 2, 1 and 0 (no room for a token: the cut would count from the end),
    a fractional one, one str; 3 is the shortest row and still holds [CLS] w [SEP]."""
    tokenizer = load_tokenizer(str(model_dir))
    for bad in (2, 1, 0, 8.0):
        one_line_error(lambda: embed.encode_texts(tokenizer, ["w1 w2"], bad),
                       "--max_seq_length must be at least 3")
    one_line_error(lambda: embed.encode_texts(tokenizer, "w1 w2", 8), "one str")
    assert embed.encode_texts(tokenizer, ["w1 w2"], 3) == [[tokenizer.cls_id,
                                                            VOCAB.index("w1"),
                                                            tokenizer.sep_id]]


def test_check_ids_is_the_one_id_check():
    """Cases: ids in range pass (also an empty batch); the first id past the table, a negative
    one and float ids are named with the table's name and size."""
    check_ids("input_ids", [[0, 63]], 64, "M")
    check_ids("input_ids", np.zeros((0, 4), np.int32), 64, "M")
    one_line_error(lambda: check_ids("input_ids", [[1, 70]], 64, "M"), "holds id 70",
                   "M has vocab_size=64", "0..63")
    one_line_error(lambda: check_ids("segment_ids", [[-1]], 2, "M", "type_vocab_size"),
                   "holds id -1", "type_vocab_size=2")
    one_line_error(lambda: check_ids("input_ids", [[1.0]], 64, "M"), "integer ids")
