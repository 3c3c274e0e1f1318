"""A converted sentence-transformers model tells the truth (issue 66): `bert-jax embed` makes a
model's own sentence vectors, its Dense layers and max / mean_sqrt_len pooling included, equal
to those plain torch computes from the same weights; what it cannot reproduce (weighted-mean or
last-token pooling, an unknown activation or module, a module out of place) it refuses in one
line naming the module or pooling and the folder."""

from __future__ import annotations

import json

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.models.config import BertConfig
from bert_jax.models.heads import BertForPreTraining
from bert_jax.serve import embed
from bert_jax.weights import hf, pretrained, sentence_embedding

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONFIG = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)


@pytest.fixture(scope="module")
def hf_weights(tmp_path_factory):
    """A tiny HF BERT folder (random weights, a 40-token vocabulary), copied per test."""
    directory = tmp_path_factory.mktemp("st") / "hf"
    init = jax.jit(BertForPreTraining(CONFIG).init)  # one program, not op by op
    params = nn.unbox(init(jax.random.key(0), np.ones((1, 4), np.int32))["params"])
    hf.save_hf_dir(directory, CONFIG, params)
    words = [f"word{i}" for i in range(CONFIG.vocab_size - len(SPECIALS))]
    (directory / "vocab.txt").write_text("\n".join(SPECIALS + words) + "\n")
    return directory


def st_folder(root, modules: list[str], pooling: dict | None = None, weights=None):
    """A sentence-transformers folder at root/st: modules.json naming Transformer + `modules`
    (`idx_Kind` folders), the Pooling module's config, and the HF files of `weights` if given."""
    directory = root / "st"
    directory.mkdir(parents=True)
    if weights is not None:
        for file in weights.iterdir():
            (directory / file.name).write_bytes(file.read_bytes())
    entries = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"}]
    for i, kind in enumerate(modules, start=1):
        entries.append({"idx": i, "name": str(i), "path": f"{i}_{kind}",
                        "type": f"sentence_transformers.models.{kind}"})
        (directory / f"{i}_{kind}").mkdir()
        if kind == "Pooling":
            (directory / f"{i}_{kind}" / "config.json").write_text(json.dumps(
                {"word_embedding_dimension": CONFIG.hidden_size, **(pooling or {})}))
        if kind == "Dense":  # GELU unless the test writes its own config
            (directory / f"{i}_{kind}" / "config.json").write_text(json.dumps(
                {"in_features": CONFIG.hidden_size, "out_features": 8, "bias": True,
                 "activation_function": "torch.nn.modules.activation.GELU"}))
    (directory / "modules.json").write_text(json.dumps(entries))
    return directory


MEAN = {"pooling_mode_mean_tokens": True}


@pytest.mark.parametrize("modules, pooling, named", [
    (["Pooling"], {"pooling_mode_weightedmean_tokens": True},
     "pooling pooling_mode_weightedmean_tokens (1_Pooling)"),
    (["Pooling"], {"pooling_mode_lasttoken": True}, "pooling pooling_mode_lasttoken (1_Pooling)"),
    (["Pooling"], {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True},
     "pooling pooling_mode_cls_token + pooling_mode_mean_tokens (1_Pooling)"),
    (["Pooling"], {}, "pooling (none) (1_Pooling)"),
    (["Pooling", "LayerNorm"], MEAN, "LayerNorm module (2_LayerNorm)"),
    (["Pooling", "Dense"], MEAN, "Dense module's activation torch.nn.modules.activation.GELU "
     "(2_Dense)"),
    (["Dense", "Pooling"], MEAN, "Dense module (1_Dense)"),
    (["Pooling", "Normalize", "Dense"], MEAN, "Dense module after Normalize (3_Dense)"),
    (["Normalize"], None, "missing Pooling module"),
])
def test_what_embed_cannot_reproduce_is_recorded_and_refused(tmp_path, modules, pooling, named):
    """Cases: weighted-mean and last-token pooling, two pooling modes at once, none, an unknown
    module (LayerNorm), a Dense layer with an activation embed has not (GELU), a Dense layer
    before the pooling or after Normalize, no Pooling module: each is recorded as unreproduced,
    and `own_settings` (what embed uses without --pooling) refuses the folder in one line naming
    it; with --pooling, only max_seq_length is kept."""
    directory = st_folder(tmp_path, modules, pooling)
    (directory / "sentence_bert_config.json").write_text('{"max_seq_length": 24}')
    settings, notes = sentence_embedding.read_hf_settings(str(directory))
    assert named in ", ".join(settings["unreproduced"])
    assert len(notes) == 1 and named in notes[0]
    (directory / sentence_embedding.SETTINGS_FILE).write_text(json.dumps(settings))
    with pytest.raises(UserError, match="embed cannot make its sentence vectors") as caught:
        sentence_embedding.own_settings(str(directory), None)
    message = str(caught.value)
    assert "\n" not in message and named in message and str(directory) in message
    assert sentence_embedding.own_settings(str(directory), "mean") == {"max_seq_length": 24}


def test_reproducible_modules_are_kept(tmp_path):
    """Cases: cls, mean, max and mean_sqrt_len pooling, with or without Normalize, record no
    "unreproduced"; embed's --pooling choices are the ones the refusal offers."""
    assert sentence_embedding.EMBED_POOLINGS == embed.POOLINGS
    for i, (modules, mode, expected) in enumerate([
            (["Pooling", "Normalize"], "mean_tokens", {"pooling": "mean", "normalize": True}),
            (["Pooling"], "cls_token", {"pooling": "cls", "normalize": False}),
            (["Pooling"], "max_tokens", {"pooling": "max", "normalize": False}),
            (["Pooling", "Normalize"], "mean_sqrt_len_tokens", {"pooling": "mean_sqrt_len",
                                                                "normalize": True})]):
        directory = st_folder(tmp_path / str(i), modules, {f"pooling_mode_{mode}": True})
        assert sentence_embedding.read_hf_settings(str(directory)) == (expected, [])


def test_the_hub_fetches_the_dense_modules():
    """Cases: a Hub model's file list with 1_Pooling, 2_Dense (safetensors and a .bin beside
    it) and 3_Dense (a .bin alone): their configs and one weights file each are fetched."""
    from bert_jax.weights import hub

    names = {"config.json", "vocab.txt", "model.safetensors", "modules.json",
             "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/model.safetensors",
             "2_Dense/pytorch_model.bin", "3_Dense/config.json", "3_Dense/pytorch_model.bin"}
    wanted = hub._wanted(names, "org/st")
    assert {"1_Pooling/config.json", "2_Dense/config.json", "2_Dense/model.safetensors",
            "3_Dense/config.json", "3_Dense/pytorch_model.bin"} <= set(wanted)
    assert "2_Dense/pytorch_model.bin" not in wanted


def run_embed(model_dir, tmp_path, capsys, *flags):
    texts, out = tmp_path / "texts.txt", tmp_path / "vectors.npy"
    texts.write_text("word1 word2 word3\nword4\n", encoding="utf-8")
    code = cli.main(["embed", "--model", str(model_dir), "--input", str(texts),
                     "--output", str(out), *flags])
    captured = capsys.readouterr()
    return code, captured, (np.load(out) if code == 0 else None)


def test_embed_refuses_what_it_cannot_reproduce_and_never_calls_other_vectors_its_own(
        hf_weights, tmp_path, capsys):
    """Cases: a converted model with mean pooling, a Dense layer of an activation embed has not
    (GELU) and Normalize: `embed` without --pooling exits 2 with one line naming the module and
    the model folder and writes nothing; with --pooling mean it writes the encoder's
    mean-pooled vectors, not normalised and not called the model's own. The same model without
    the Dense layer embeds as its own (mean pooling, normalised: those vectors at unit length),
    and with --layer 0 as mean pooling only."""
    dense = st_folder(tmp_path / "dense", ["Pooling", "Dense", "Normalize"], MEAN, hf_weights)
    model_dir = tmp_path / "dense_model"
    pretrained.convert_hf_dir(str(dense), str(model_dir))
    code, captured, _ = run_embed(model_dir, tmp_path, capsys)
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Dense module's activation" in lines[0] and "(2_Dense)" in lines[0]
    assert str(model_dir) in lines[0] and "--pooling" in lines[0]
    assert not (tmp_path / "vectors.npy").exists()
    code, captured, vectors = run_embed(model_dir, tmp_path, capsys, "--pooling", "mean")
    assert code == 0 and "the model's own" not in captured.out
    assert "normalised" not in captured.out and vectors.shape == (2, CONFIG.hidden_size)
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3)

    plain = st_folder(tmp_path / "plain", ["Pooling", "Normalize"], MEAN, hf_weights)
    plain_dir = tmp_path / "plain_model"
    pretrained.convert_hf_dir(str(plain), str(plain_dir))
    code, captured, own = run_embed(plain_dir, tmp_path, capsys)
    assert code == 0 and "(mean pooling, normalised: the model's own)" in captured.out
    np.testing.assert_allclose(own, vectors / np.linalg.norm(vectors, axis=1, keepdims=True),
                               atol=1e-5)
    code, captured, _ = run_embed(plain_dir, tmp_path, capsys, "--layer", "0")
    assert code == 0 and "(mean pooling)" in captured.out  # not its own: another layer


TORCH_ACTIVATIONS = {"Tanh": "torch.nn.modules.activation.Tanh",
                     "Identity": "torch.nn.modules.linear.Identity",
                     "ReLU": "torch.nn.modules.activation.ReLU"}


def write_dense(folder, n_in, n_out, bias, activation, weights_file, seed):
    """A Dense module as sentence-transformers saves it: config.json and linear.weight [out, in]
    (+ linear.bias) in model.safetensors or pytorch_model.bin. Returns the torch layers."""
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    linear = torch.nn.Linear(n_in, n_out, bias=bias)
    (folder / "config.json").write_text(json.dumps(
        {"in_features": n_in, "out_features": n_out, "bias": bias,
         "activation_function": TORCH_ACTIVATIONS[activation]}))
    state = {f"linear.{k}": v.detach().contiguous() for k, v in linear.state_dict().items()}
    if weights_file == "model.safetensors":
        save_file(state, str(folder / weights_file))
    else:
        torch.save(state, folder / weights_file)
    return [linear, getattr(torch.nn, activation)()]


@pytest.mark.parametrize("mode, dense, normalize", [
    ("max_tokens", [(8, True, "Tanh", "model.safetensors")], True),
    ("mean_sqrt_len_tokens", [(8, False, "ReLU", "pytorch_model.bin"),
                              (4, True, "Identity", "model.safetensors")], False),
])
def test_dense_and_pooling_equal_plain_torch(hf_weights, tmp_path, capsys, mode, dense,
                                             normalize):
    """Cases: max pooling, a Dense layer (bias, Tanh, model.safetensors) and Normalize;
    mean_sqrt_len pooling and two Dense layers (no bias and ReLU from pytorch_model.bin, then
    Identity). `embed` without flags gives what plain torch computes from the same folder:
    transformers' BertModel states, sentence-transformers' pooling over the mask, the Dense
    layers, the normalisation; its line calls them the model's own."""
    import torch
    import transformers

    modules = ["Pooling", *["Dense"] * len(dense), *(["Normalize"] if normalize else [])]
    folder = st_folder(tmp_path, modules, {f"pooling_mode_{mode}": True}, hf_weights)
    layers, width = [], CONFIG.hidden_size
    for i, (n_out, bias, activation, weights_file) in enumerate(dense, start=2):
        layers += write_dense(folder / f"{i}_Dense", width, n_out, bias, activation,
                              weights_file, seed=i)
        width = n_out
    model_dir = tmp_path / "model"
    pretrained.convert_hf_dir(str(folder), str(model_dir))
    code, captured, vectors = run_embed(model_dir, tmp_path, capsys)
    assert code == 0 and "the model's own" in captured.out

    lines = (tmp_path / "texts.txt").read_text(encoding="utf-8").splitlines()
    tokenizer = transformers.BertTokenizer(str(folder / "vocab.txt"))
    encoded = tokenizer(lines, padding=True, return_tensors="pt")
    reference = transformers.BertModel.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        states = reference(**encoded).last_hidden_state
        mask = encoded["attention_mask"][..., None].float()
        if mode == "max_tokens":
            pooled = states.masked_fill(mask == 0, -1e9).max(1).values
        else:
            pooled = (states * mask).sum(1) / mask.sum(1).sqrt()
        expected = torch.nn.Sequential(*layers)(pooled)
        if normalize:
            expected = torch.nn.functional.normalize(expected)
    assert vectors.shape == (len(lines), width)
    np.testing.assert_allclose(vectors, expected.numpy(), atol=2e-5)
