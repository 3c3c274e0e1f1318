"""Chinese and multilingual presets, and a Google-format TF1 checkpoint with a Chinese
vocabulary (written here, tiny dims) that converts, embeds Chinese text the way
transformers does, and fine-tunes a step on a headerless Chinese file."""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tensorflow")

from bert_jax.models.presets import PRESETS, preset  # noqa: E402
from bert_jax.serve import embed  # noqa: E402
from bert_jax.weights import cli, pretrained  # noqa: E402
from bert_jax.weights.config_json import from_google_dict  # noqa: E402

from helpers.finetune import fine_tune_briefly  # noqa: E402
from helpers.tf1 import google_names, write_tf1_checkpoint  # noqa: E402

CHARS = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可也你"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "，", "。"] + list(CHARS)
CONFIG = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
              max_position_embeddings=64, type_vocab_size=2, initializer_range=0.02)
# chinese_L-12_H-768_A-12/bert_config.json as Google released it.
GOOGLE_CHINESE = dict(attention_probs_dropout_prob=0.1, directionality="bidi",
                      hidden_act="gelu", hidden_dropout_prob=0.1, hidden_size=768,
                      initializer_range=0.02, intermediate_size=3072,
                      max_position_embeddings=512, num_attention_heads=12,
                      num_hidden_layers=12, pooler_fc_size=768, pooler_num_attention_heads=12,
                      pooler_num_fc_layers=3, pooler_size_per_head=128,
                      pooler_type="first_token_transform", type_vocab_size=2,
                      vocab_size=21128)


def test_presets():
    assert preset("bert-base-chinese") == from_google_dict(GOOGLE_CHINESE)
    assert PRESETS["bert-base-multilingual-cased"].vocab_size == 119547
    assert PRESETS["bert-base-multilingual-uncased"].vocab_size == 105879
    for name in ("bert-base-chinese", "bert-base-multilingual-cased"):
        assert PRESETS[name].replace(vocab_size=30522) == PRESETS["bert-base"]


@pytest.fixture(scope="module")
def google_chinese(tmp_path_factory):
    """(transformers model, directory with bert_model.ckpt, bert_config.json, vocab.txt)."""
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(transformers.BertConfig(**CONFIG)).eval()
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    names = {k: v for k, v in google_names().items() if "layer." not in k or
             int(k.split("layer.")[1].split(".")[0]) < CONFIG["num_hidden_layers"]}
    variables = {}
    for hf_name, (name, transposed) in names.items():
        value = state[hf_name] + 0.01
        with torch.no_grad():
            model.get_parameter(hf_name).copy_(torch.from_numpy(value))
        variables[name] = np.ascontiguousarray(value.T if transposed else value)
    directory = tmp_path_factory.mktemp("chinese_L-2_H-32_A-4")
    write_tf1_checkpoint(str(directory / "bert_model.ckpt"), variables)
    (directory / "bert_config.json").write_text(json.dumps(CONFIG))
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return model, directory


@pytest.mark.slow
def test_chinese_checkpoint_converts_embeds_and_finetunes(google_chinese, tmp_path):
    model, google = google_chinese
    out = tmp_path / "converted"
    assert cli.convert_main(["--from_tf1", str(google), "--output", str(out)]) == 0
    loaded = pretrained.load(out)
    assert loaded.config.vocab_size == len(VOCAB)

    texts = ["我们是中国人。", "他在大会上作了一个发言，\uf900你好"]  # [UNK]s included
    ours = embed.embed_texts(loaded, texts, pooling="cls", max_seq_length=32)
    reference = transformers.BertTokenizer(str(google / "vocab.txt"), do_lower_case=True)
    for text, vector in zip(texts, ours):
        ids = reference(text, return_tensors="pt")
        with torch.no_grad():
            hidden = model.bert(**ids).last_hidden_state[0, 0].numpy()
        np.testing.assert_allclose(vector, hidden, atol=1e-4)

    results = fine_tune_briefly(out, tmp_path, text=lambda i: CHARS[i:i + 12])
    assert 0 <= results["validation"]["accuracy"] <= 1
    assert os.path.isdir(tmp_path / "run" / "best")
