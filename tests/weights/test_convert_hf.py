"""`bert-jax convert --from_hf` and `bert-jax embed`: the real MiniLM end to end,
and checkpoints that do not match their config."""

import json
import os
import shutil

import flax.linen as nn
import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_jax import cli
from bert_jax.models.config import BertConfig
from bert_jax.models.heads import BertForPreTraining
from bert_jax.weights import hf, pretrained

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_minilm_convert_then_embed_gives_published_similarity(tmp_path, minilm_dir):
    model_dir = tmp_path / "minilm"
    assert cli.main(["convert", "--from_hf", minilm_dir, "--output", str(model_dir)]) == 0
    texts = tmp_path / "texts.txt"
    texts.write_text("A man is eating food.\nA man is eating a piece of bread.\n"
                     "The new movie is awesome.\n", encoding="utf-8")
    out = tmp_path / "vectors.npy"
    assert cli.main(["embed", "--model", str(model_dir), "--input", str(texts),
                     "--output", str(out), "--pooling", "mean"]) == 0
    vectors = np.load(out)
    assert vectors.shape == (3, 384)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert abs(unit[0] @ unit[1] - 0.755) <= 0.001
    assert unit[0] @ unit[2] < 0.3  # unrelated sentence


def test_minilm_embeds_as_sentence_transformers_without_flags(tmp_path, minilm_dir):
    """convert records all-MiniLM-L6-v2's modules.json (mean pooling, Normalize) and
    sentence_bert_config.json (256 tokens): `embed` with no flag gives sentence-transformers'
    vectors: transformers' states mean-pooled over the mask, cut at 256 tokens, unit length."""
    import torch
    import transformers

    model_dir, texts, out = tmp_path / "minilm", tmp_path / "texts.txt", tmp_path / "v.npy"
    assert cli.main(["convert", "--from_hf", minilm_dir, "--output", str(model_dir)]) == 0
    lines = ["A man is eating food.", "A man is eating a piece of bread.",
             " ".join(["word"] * 300)]  # past 256 tokens: cut there, as the model was used
    texts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli.main(["embed", "--model", str(model_dir), "--input", str(texts),
                     "--output", str(out)]) == 0
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    ref = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    encoded = tokenizer(lines, padding=True, truncation=True, max_length=256,
                        return_tensors="pt")
    with torch.no_grad():
        states = ref(**encoded).last_hidden_state
    weights = encoded["attention_mask"][..., None].float()
    expected = torch.nn.functional.normalize((states * weights).sum(1) / weights.sum(1))
    np.testing.assert_allclose(np.load(out), expected.numpy(), atol=1e-5)
    assert abs(np.load(out)[0] @ np.load(out)[1] - 0.755) <= 0.001


@pytest.mark.parametrize("modules, pooling, recorded", [
    (["Pooling", "Normalize"], {"pooling_mode_cls_token": True}, {"pooling": "cls",
                                                                  "normalize": True}),
    (["Pooling"], {"pooling_mode_mean_tokens": True}, {"pooling": "mean", "normalize": False}),
    (["Pooling", "LayerNorm"], {"pooling_mode_mean_tokens": True}, {
        "pooling": "mean", "normalize": False, "unreproduced": ["LayerNorm module (2_LayerNorm)"]}),
    (["Pooling"], {"pooling_mode_max_tokens": True}, {"pooling": "max", "normalize": False}),
    (["Pooling"], {"pooling_mode_weightedmean_tokens": True}, {
        "normalize": False,
        "unreproduced": ["pooling pooling_mode_weightedmean_tokens (1_Pooling)"]})])
def test_sentence_transformers_settings_are_recorded_or_named(tiny_hf_dir, tmp_path, caplog,
                                                              modules, pooling, recorded):
    """modules.json's pooling (cls, mean, max) and Normalize are recorded for `embed`; a pooling
    embed has not (weighted mean) and a module that is not converted (LayerNorm) are recorded as
    unreproduced and named in a warning (tests/weights/test_sentence_modules.py: embed refuses
    them, and converts Dense layers)."""
    from bert_jax.weights import sentence_embedding

    directory = tiny_hf_dir[0]
    (directory / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
        + [{"idx": i + 1, "name": str(i + 1), "path": f"{i + 1}_{kind}",
            "type": f"sentence_transformers.models.{kind}"} for i, kind in enumerate(modules)]))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 16, **pooling}))
    (directory / "sentence_bert_config.json").write_text('{"max_seq_length": 24}')
    out = tmp_path / "ours"
    with caplog.at_level("WARNING"):
        assert cli.main(["convert", "--from_hf", str(directory), "--output", str(out)]) == 0
    settings = sentence_embedding.read(str(out))
    assert settings == {**recorded, "max_seq_length": 24}
    for unreproduced in recorded.get("unreproduced", []):
        assert unreproduced in caplog.text
    if recorded["normalize"]:
        texts, vectors = tmp_path / "t.txt", tmp_path / "v.npy"
        texts.write_text("word1 word2\nword3\n", encoding="utf-8")
        assert cli.main(["embed", "--model", str(out), "--input", str(texts), "--output",
                         str(vectors)]) == 0
        np.testing.assert_allclose(np.linalg.norm(np.load(vectors), axis=1), 1, rtol=1e-5)


@pytest.fixture
def tiny_hf_dir(tmp_path):
    """An HF-format BERT directory with random weights and a 40-token vocabulary."""
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    model = BertForPreTraining(config)
    params = nn.unbox(model.init(jax.random.key(0), np.ones((1, 4), np.int32))["params"])
    directory = tmp_path / "hf"
    hf.save_hf_dir(directory, config, params)
    words = [f"word{i}" for i in range(40 - len(SPECIALS))]
    (directory / "vocab.txt").write_text("\n".join(SPECIALS + words) + "\n")
    return directory, config, params


def convert_fails(directory, out, capsys, *needles):
    assert cli.main(["convert", "--from_hf", str(directory), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".tmp-")]


def test_round_trip_through_model_directory(tiny_hf_dir, tmp_path):
    directory, config, params = tiny_hf_dir
    out = tmp_path / "model"
    assert cli.main(["convert", "--from_hf", str(directory), "--output", str(out)]) == 0
    loaded = pretrained.load(out)
    assert loaded.config == config
    jax.tree.map(np.testing.assert_array_equal, loaded.params, params)
    assert os.path.exists(out / "vocab.txt")


def test_missing_tensor_is_named(tiny_hf_dir, tmp_path, capsys):
    directory, _, _ = tiny_hf_dir
    state = load_file(directory / "model.safetensors")
    del state["bert.encoder.layer.1.intermediate.dense.weight"]
    save_file(state, directory / "model.safetensors")
    convert_fails(directory, tmp_path / "out", capsys,
                  "missing tensor bert.encoder.layer.1.intermediate.dense.weight")


def test_shape_mismatch_is_named(tiny_hf_dir, tmp_path, capsys):
    directory, _, _ = tiny_hf_dir
    state = load_file(directory / "model.safetensors")
    state["bert.encoder.layer.0.attention.self.key.weight"] = np.zeros((16, 8), np.float32)
    save_file(state, directory / "model.safetensors")
    convert_fails(directory, tmp_path / "out", capsys,
                  "bert.encoder.layer.0.attention.self.key.weight has shape (16, 8)")


def test_config_disagreeing_with_tensors_names_them(tiny_hf_dir, tmp_path, capsys):
    directory, _, _ = tiny_hf_dir
    config = json.loads((directory / "config.json").read_text())
    config["intermediate_size"] = 48
    (directory / "config.json").write_text(json.dumps(config))
    convert_fails(directory, tmp_path / "out", capsys, "intermediate.dense.weight", "(48, 16)")


def test_malformed_config_names_the_field(tiny_hf_dir, tmp_path, capsys):
    directory, _, _ = tiny_hf_dir
    config = json.loads((directory / "config.json").read_text())
    config["num_hidden_layers"] = "two"
    (directory / "config.json").write_text(json.dumps(config))
    convert_fails(directory, tmp_path / "out", capsys, "num_hidden_layers")


def test_unexpected_tensor_and_wrong_vocab_are_named(tiny_hf_dir, tmp_path, capsys):
    directory, _, _ = tiny_hf_dir
    state = load_file(directory / "model.safetensors")
    save_file({**state, "bert.encoder.layer.2.output.dense.weight": np.zeros((16, 32),
                                                                            np.float32)},
              directory / "model.safetensors")
    convert_fails(directory, tmp_path / "out", capsys,
                  "unexpected tensor bert.encoder.layer.2.output.dense.weight")
    save_file(state, directory / "model.safetensors")
    (directory / "vocab.txt").write_text("\n".join(SPECIALS + ["a", "b"]) + "\n")
    convert_fails(directory, tmp_path / "out", capsys, "vocab_size=40")


def test_pytorch_bin_is_read_without_torch_pickle_execution(tiny_hf_dir, tmp_path):
    torch = pytest.importorskip("torch")
    directory, config, params = tiny_hf_dir
    state = load_file(directory / "model.safetensors")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copy(directory / name, bin_dir)
    torch.save({k: torch.from_numpy(v).to(torch.bfloat16 if "pooler" in k else torch.float32)
                for k, v in state.items()}, bin_dir / "pytorch_model.bin")
    _, loaded = hf.load_hf_dir(bin_dir)
    np.testing.assert_array_equal(loaded["bert"]["embeddings"]["word_embeddings"]["embedding"],
                                  params["bert"]["embeddings"]["word_embeddings"]["embedding"])
    pooler = params["bert"]["pooler"]["kernel"]
    np.testing.assert_allclose(loaded["bert"]["pooler"]["kernel"], pooler, rtol=1e-2)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"x": Evil()}, bin_dir / "pytorch_model.bin", _use_new_zipfile_serialization=True)
    with pytest.raises(Exception, match="refusing to load"):
        hf.read_state_dict(bin_dir)
