"""`bert-jax extend-vocab`: new tokens fill [unusedN] slots then new rows; old-token
text computes exactly as before; new tokens come out as single pieces."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.models.config import BertConfig
from bert_jax.models.heads import BertForPreTraining
from bert_jax.tokenization import WordPieceTokenizer, load_tokenizer
from bert_jax.weights import cli, pretrained

CONFIG = BertConfig(vocab_size=30, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=32)
VOCAB = (["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
         + ["the", "cat", "sat", "on", "mat", "dog", "ran", "a", "##s", "big", "red", "hat",
            "and", "old", "man", "saw", "it", ".", ",", "!", "new", "day"])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    module = BertForPreTraining(CONFIG)
    shapes = nn.unbox(jax.eval_shape(module.init, jax.random.key(0), np.zeros((1, 4), np.int32)))
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda s: 0.05 * rng.standard_normal(s.shape, np.float32),
                          shapes["params"])
    path = tmp_path_factory.mktemp("extend") / "model"
    pretrained.save(path, CONFIG, params, tokenizer=WordPieceTokenizer(VOCAB))
    return path


def _run(model_dir, tmp_path, tokens):
    tokens_file = tmp_path / "tokens.txt"
    tokens_file.write_text("\n".join(tokens) + "\n")
    out = tmp_path / "extended"
    assert cli.extend_vocab_main(["--model", str(model_dir), "--add_tokens", str(tokens_file),
                              "--output", str(out)]) == 0
    return pretrained.load(out)


def test_slots_then_appended_rows(model_dir, tmp_path):
    old = pretrained.load(model_dir)
    new = _run(model_dir, tmp_path, ["covid", "zebra", "Quokka", "cat", "covid", "wombat",
                                     "axolotl"])
    tokenizer = load_tokenizer(new.tokenizer_dir)
    assert new.config.vocab_size == tokenizer.vocab_size == 32
    assert [tokenizer.id_to_token(i) for i in (1, 2, 3, 30, 31)] == [
        "covid", "zebra", "quokka", "wombat", "axolotl"]
    encoding = tokenizer.encode("The covid zebra saw a QUOKKA, wombat and axolotl!")
    assert encoding.tokens == ["the", "covid", "zebra", "saw", "a", "quokka", ",", "wombat",
                               "and", "axolotl", "!"]

    old_table = old.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    table = new.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    np.testing.assert_array_equal(table[:30], old_table)  # slots keep their rows
    appended = table[30:]
    assert appended.shape == (2, 32) and np.all(np.abs(appended) <= 0.04)
    assert 0.01 < appended.std() < 0.03
    np.testing.assert_array_equal(new.params["mlm"]["output_bias"][30:], 0)


def test_old_token_outputs_unchanged(model_dir, tmp_path):
    old = pretrained.load(model_dir)
    new = _run(model_dir, tmp_path, ["covid", "zebra", "quokka", "wombat"])
    text = "the old man saw a big red hat, and the cat sat on it!"
    old_ids = load_tokenizer(old.tokenizer_dir).encode(text).ids
    assert load_tokenizer(new.tokenizer_dir).encode(text).ids == old_ids
    ids = np.array([[5, *old_ids, 6]], np.int32)
    before = jax.jit(BertForPreTraining(old.config).apply)({"params": old.params}, ids)
    after = jax.jit(BertForPreTraining(new.config).apply)({"params": new.params}, ids)
    np.testing.assert_array_equal(after.encoder.sequence_output,
                                  before.encoder.sequence_output)
    np.testing.assert_array_equal(after.nsp_logits, before.nsp_logits)
    np.testing.assert_allclose(after.mlm_logits[..., :30], before.mlm_logits, atol=1e-6)


def test_token_that_would_be_split_is_refused(model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"single pieces.*'covid-19' -> \["):
        _run(model_dir, tmp_path, ["zebra", "covid-19"])
    assert not (tmp_path / "extended").exists()
