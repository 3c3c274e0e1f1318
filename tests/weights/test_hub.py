"""Models by name (`hf:ORG/NAME[@REVISION]`) without a network: a local Hub server
(tests/helpers/hub_server.py, HF_ENDPOINT) serving a small BERT this test writes, and the cache
it fills used under HF_HUB_OFFLINE=1."""

from __future__ import annotations

import io
import os
import shutil

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.models.config import BertConfig
from bert_jax.models.heads import BertForPreTraining
from bert_jax.weights import hf, hub, pretrained

from helpers.finetune import CONFIG
from helpers.hub_server import HubServer, Repo

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the a man is eating food cat sat on mat it rains he said yes . , two dogs run".split()
CONFIG_TINY = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
OLD, NEW = "a" * 40, "b" * 40


def hf_files(tmp_path, seed: int) -> tuple[dict[str, bytes], dict]:
    """An HF BERT directory's files (random weights from `seed`), plus files bert_jax does
    not read; and the parameters."""
    model = BertForPreTraining(CONFIG_TINY)
    params = nn.unbox(model.init(jax.random.key(seed), np.ones((1, 4), np.int32))["params"])
    directory = tmp_path / f"hf{seed}"
    hf.save_hf_dir(directory, CONFIG_TINY, params)
    vocab = SPECIALS + WORDS + [f"w{i}" for i in range(64 - len(SPECIALS) - len(WORDS))]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (directory / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    files.update({"tf_model.h5": b"not read", "pytorch_model.bin": b"not read either",
                  "README.md": b"# tiny"})
    return files, params


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub_models")
    (old, old_params), (new, new_params) = hf_files(tmp, 0), hf_files(tmp, 1)
    return {"old": old, "new": new, "old_params": old_params, "new_params": new_params}


@pytest.fixture
def server(models, tmp_path, monkeypatch):
    repos = {"org/tiny": Repo({OLD: models["old"], NEW: models["new"]}, {"main": NEW}),
             "org/private": Repo({NEW: models["new"]}, {"main": NEW}, token="secret")}
    hub_server = HubServer(repos)
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    yield hub_server
    hub_server.close()


def assert_params(loaded, expected):
    jax.tree.map(np.testing.assert_array_equal, loaded, expected)


def test_a_model_by_name_is_fetched_converted_once_and_pinned(server, models, tmp_path):
    loaded = pretrained.load("hf:org/tiny")
    assert_params(loaded.params, models["new_params"])
    files = sorted(path.rsplit("/", 1)[1] for method, path in server.requests
                   if method == "GET" and "/resolve/" in path)
    assert files == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    cache = tmp_path / "hf_cache" / "models--org--tiny"
    assert loaded.tokenizer_dir == str(cache / "bert_jax" / NEW)
    server.requests.clear()
    assert pretrained.load("org/tiny").tokenizer_dir == loaded.tokenizer_dir  # the bare name
    assert [m for m, p in server.requests if "/resolve/" in p] == []  # converted once
    pinned = pretrained.load(f"hf:org/tiny@{OLD}")
    assert_params(pinned.params, models["old_params"])
    assert pinned.tokenizer_dir == str(cache / "bert_jax" / OLD)


def test_the_cache_serves_offline_and_an_empty_one_fails_in_one_line(server, models,
                                                                    monkeypatch, tmp_path):
    pretrained.load("hf:org/tiny")
    server.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert_params(pretrained.load("hf:org/tiny").params, models["new_params"])
    assert pretrained.open_model("hf:org/tiny").tokenizer_dir.endswith(NEW)
    assert server.requests == []
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    with pytest.raises(UserError, match=r"^hf:org/tiny is not in the Hugging Face cache and "
                       r"HF_HUB_OFFLINE is set: run once with network access .*`hf download "
                       r"org/tiny`"):
        pretrained.load("hf:org/tiny")
    assert server.requests == []


def test_an_unreachable_hub_falls_back_to_the_cache_fast(server, monkeypatch, tmp_path):
    pretrained.load("hf:org/tiny")
    server.close()
    assert pretrained.open_model("hf:org/tiny").kind == "model"  # from the cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    with pytest.raises(UserError, match="the Hub cannot be reached"):
        pretrained.load("hf:org/tiny")


def test_private_models_take_the_token_and_names_fail_in_one_line(server, monkeypatch):
    with pytest.raises(UserError, match="^hf:org/private: no such model on the Hub .*HF_TOKEN"):
        pretrained.load("hf:org/private")
    monkeypatch.setenv("HF_TOKEN", "secret")
    assert pretrained.load("hf:org/private").config.hidden_size == 16
    with pytest.raises(UserError, match="has no revision 'v9'"):
        pretrained.load("hf:org/tiny@v9")
    with pytest.raises(UserError, match=r"^org/typo \(no such local path; as a Hub model\): "
                       "no such model on the Hub"):
        pretrained.load("org/typo")
    with pytest.raises(UserError, match="a Hub model is hf:ORG/NAME"):
        pretrained.load("hf:tiny")



def test_a_local_path_wins_over_a_bare_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub.hub_name("org/tiny") == "org/tiny"
    os.makedirs("org/tiny")
    assert hub.hub_name("org/tiny") is None and hub.hub_name("hf:org/tiny") == "org/tiny"
    assert hub.hub_name("/abs/path") is None and hub.hub_name("gs://bucket/model") is None


def test_convert_and_embed_take_a_name(server, models, tmp_path, capsys):
    out = tmp_path / "model"
    assert cli.main(["convert", "--from_hf", "hf:org/tiny", "--output", str(out)]) == 0
    assert_params(pretrained.load(str(out)).params, models["new_params"])
    texts = tmp_path / "texts.txt"
    texts.write_text("a man is eating food .\nthe cat sat on the mat .\n")
    vectors = tmp_path / "vectors.npy"
    assert cli.main(["embed", "--model", "hf:org/tiny", "--input", str(texts),
                     "--output", str(vectors)]) == 0
    assert np.load(vectors).shape == (2, 16)


@pytest.mark.long
def test_finetune_from_a_name_on_glue_files_and_offline_exit_2(server, tmp_path, monkeypatch,
                                                               capsys):
    from helpers.glue import PUBLISHED
    for name, text in PUBLISHED["MRPC"].items():
        (tmp_path / "glue_data" / "MRPC").mkdir(parents=True, exist_ok=True)
        (tmp_path / "glue_data" / "MRPC" / name).write_text(text, encoding="utf-8")
    args = ["finetune", "--config", f"{CONFIG}:mrpc", "--init_from", "hf:org/tiny",
            f"--config.glue_dir={tmp_path / 'glue_data'}", "--config.max_seq_length=32",
            "--config.num_train_epochs=1", "--workdir"]
    assert cli.main(args + [str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "glue_submission" / "MRPC.tsv").exists()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    capsys.readouterr()
    assert cli.main(args + [str(tmp_path / "offline")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-jax finetune: error: hf:org/tiny is not in the Hugging Face "
                          "cache") and err.count("\n") == 1, err
    assert not (tmp_path / "offline").exists()


def test_only_the_pytorch_bin_when_there_is_no_safetensors(server, models, tmp_path):
    torch = pytest.importorskip("torch")
    state = {k: torch.from_numpy(np.array(v)) for k, v in
             hf.params_to_hf(models["old_params"], CONFIG_TINY).items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    files = {k: v for k, v in models["old"].items() if k != "model.safetensors"}
    files["pytorch_model.bin"] = buffer.getvalue()
    server.repos["org/bin"] = Repo({OLD: files}, {"main": OLD})
    assert_params(pretrained.load("hf:org/bin").params, models["old_params"])


def test_a_config_by_name_is_read_without_converting(server, models, tmp_path):
    """What `bert-jax compile` sizes a run from: the Hub model's config.json, with nothing
    converted into the cache."""
    config = pretrained.model_config("hf:org/tiny")
    assert config.vocab_size == pretrained.load("hf:org/tiny").config.vocab_size
    converted = tmp_path / "hf_cache" / "models--org--tiny" / "bert_jax"
    shutil.rmtree(converted)
    assert pretrained.model_config("hf:org/tiny") == config
    assert not converted.exists()
