"""ERNIE (`model_type: ernie`) converts as the BERT encoder it is: parity with transformers'
ErnieForPreTraining on random weights (ERNIE 1.0's layout, and 2.0/3.0's task-type
embeddings), its tokenizer's ids, and RoBERTa's model types refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.models.heads import BertForPreTraining
from bert_jax.tokenization import load_tokenizer
from bert_jax.weights import hf, pretrained

from helpers.parity import padded_batch, scale_weights

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
transformers = pytest.importorskip("transformers")

TOL = 1e-4
WORDS = ["的", "是", "中", "国", "人", "我", "爱", "北", "京", "天", "安", "门", "hello",
         "world", "##s", "bert", ",", "。"]
TEXTS = ["我爱北京天安门。", "Hello worlds, 中国人是BERT的!"]


def ernie_dir(tmp_path, use_task_id: bool, seed: int):
    """A transformers ErnieForPreTraining with every weight random, saved with a vocab.txt;
    ERNIE 1.0's settings (relu, layer_norm_eps 1e-5, 513 positions)."""
    torch.manual_seed(seed)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    config = transformers.ErnieConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, hidden_act="relu", max_position_embeddings=40, type_vocab_size=2,
        layer_norm_eps=1e-5, use_task_id=use_task_id, task_type_vocab_size=3)
    model = scale_weights(transformers.ErnieForPreTraining(config).eval())
    directory = tmp_path / f"ernie{int(use_task_id)}"
    model.save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (directory / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    return directory, model


@pytest.mark.parametrize("use_task_id", [False, True], ids=["ernie-1.0", "task-embeddings"])
def test_ernie_matches_transformers(tmp_path, use_task_id):
    directory, ref = ernie_dir(tmp_path, use_task_id, seed=3)
    assert json.loads((directory / "config.json").read_text())["model_type"] == "ernie"
    config, params = hf.load_hf_dir(directory)
    ids, mask, segments = padded_batch(config.vocab_size, [17, 9, 3], 24)
    with torch.no_grad():
        expected = ref(torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       token_type_ids=torch.tensor(segments, dtype=torch.long),
                       output_hidden_states=True)
    out = BertForPreTraining(config).apply({"params": params}, ids, mask, segments)
    np.testing.assert_allclose(out.encoder.sequence_output,
                               expected.hidden_states[-1].numpy(), atol=TOL)
    np.testing.assert_allclose(out.mlm_logits, expected.prediction_logits.numpy(), atol=TOL)
    np.testing.assert_allclose(out.nsp_logits, expected.seq_relationship_logits.numpy(),
                               atol=TOL)


def test_converted_ernie_tokenizes_as_transformers(tmp_path):
    directory, _ = ernie_dir(tmp_path, False, seed=4)
    out = tmp_path / "model"
    assert cli.main(["convert", "--from_hf", str(directory), "--output", str(out)]) == 0
    assert pretrained.load(str(out)).config.hidden_act == "relu"
    ours = load_tokenizer(str(out))
    theirs = transformers.BertTokenizer(str(directory / "vocab.txt"), do_lower_case=True)
    for text in TEXTS:
        assert ours.encode(text).ids == theirs.encode(text, add_special_tokens=False), text


def test_an_encoder_not_read_is_refused_in_one_line(tmp_path, capsys):
    directory, _ = ernie_dir(tmp_path, False, seed=5)
    values = json.loads((directory / "config.json").read_text())
    values["model_type"] = "roberta-prelayernorm"
    (directory / "config.json").write_text(json.dumps(values))
    capsys.readouterr()
    assert cli.main(["convert", "--from_hf", str(directory), "--output",
                     str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "model_type 'roberta-prelayernorm' is not an encoder bert_jax reads" in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()
