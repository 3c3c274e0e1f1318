"""`bert-jax convert --model MODEL_DIR --to_hf DIR`: transformers loads the result
with no missing or unexpected weights and computes what we compute."""


import flax.linen as nn
import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from safetensors.numpy import load_file  # noqa: E402

from bert_jax.models import heads  # noqa: E402
from bert_jax.models.config import BertConfig  # noqa: E402
from bert_jax.models.encoder import BertModel  # noqa: E402
from bert_jax.tokenization import WordPieceTokenizer  # noqa: E402
from bert_jax.weights import cli, pretrained  # noqa: E402
from bert_jax.weights.config_json import to_google_dict  # noqa: E402

CONFIG = BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]


def inputs():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 40, size=(2, 10)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    segments = np.zeros_like(ids)
    segments[:, 5:] = 1
    return ids, mask, segments


def run_hf(model, ids, mask, segments):
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids).long(),
                     attention_mask=torch.from_numpy(mask).long(),
                     token_type_ids=torch.from_numpy(segments).long())


def load_hf(directory):
    """Loads with the class config.json names; asserts every weight was used and set."""
    config = transformers.AutoConfig.from_pretrained(directory)
    model_class = getattr(transformers, config.architectures[0])
    model, info = model_class.from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    return model.eval()


def test_hf_round_trip_is_bit_exact(tmp_path):
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**to_google_dict(CONFIG))
    original = transformers.BertForPreTraining(hf_config).eval()
    with torch.no_grad():  # LayerNorms and biases away from 1 and 0
        for p in original.parameters():
            p.add_(0.01 * torch.randn_like(p))
    original.save_pretrained(tmp_path / "hf")
    WordPieceTokenizer(VOCAB).save(str(tmp_path / "hf"))

    assert cli.convert_main(["--from_hf", str(tmp_path / "hf"), "--output",
                             str(tmp_path / "ours")]) == 0
    assert cli.convert_main(["--model", str(tmp_path / "ours"),
                             "--to_hf", str(tmp_path / "back")]) == 0

    before = load_file(tmp_path / "hf" / "model.safetensors")
    after = load_file(tmp_path / "back" / "model.safetensors")
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert set(after) == set(before) - tied
    for name, value in after.items():
        assert value.dtype == before[name].dtype and np.array_equal(value, before[name]), name
    with open(tmp_path / "back" / "vocab.txt") as f:
        assert f.read().split("\n")[:-1] == VOCAB
    reloaded = load_hf(tmp_path / "back")
    np.testing.assert_array_equal(run_hf(reloaded, *inputs()).prediction_logits,
                                  run_hf(original, *inputs()).prediction_logits)


def random_params(module, rng_seed=0):
    """Random parameters without compiling an init (XLA's init compile is slow on CPU):
    LayerNorm scales near 1, everything else small and nonzero."""
    shapes = nn.unbox(jax.eval_shape(module.init, jax.random.key(0), np.zeros((1, 4), np.int32)))
    rng = np.random.default_rng(rng_seed)
    return jax.tree_util.tree_map_with_path(
        lambda path, s: np.float32(path[-1].key == "scale")
        + 0.05 * rng.standard_normal(s.shape, np.float32), shapes["params"])


def _fine_tuned(kind):
    module = {"classification": heads.BertForSequenceClassification(CONFIG, 3),
              "tagging": heads.BertForTokenClassification(CONFIG, 5),
              "span": heads.BertForQuestionAnswering(CONFIG)}[kind]
    return module, random_params(module)


@pytest.mark.parametrize("kind, architecture", [
    ("classification", "BertForSequenceClassification"),
    ("tagging", "BertForTokenClassification"),
    ("span", "BertForQuestionAnswering")])
def test_fine_tuned_heads_load_in_transformers(tmp_path, kind, architecture):
    module, params = _fine_tuned(kind)
    labels = {"classification": ["neg", "neu", "pos"], "tagging": list("ABCDE")}.get(kind)
    # Both task descriptions: the fine-tuning trainer's ("family") and the generic one.
    task = {"classification": {"name": "sst", "family": "classification",
                               "label_names": labels, "num_labels": 3},
            "tagging": {"name": "pos", "kind": "tagging", "labels": labels, "num_labels": 5},
            "span": {"name": "squad", "family": "squad"}}[kind]
    pretrained.save(tmp_path / "ours", CONFIG, params, tokenizer=WordPieceTokenizer(VOCAB),
                    task=task)
    assert cli.convert_main(["--model", str(tmp_path / "ours"),
                             "--to_hf", str(tmp_path / "hf")]) == 0

    model = load_hf(tmp_path / "hf")
    assert type(model).__name__ == architecture
    if labels:
        assert [model.config.id2label[i] for i in range(len(labels))] == labels
    ours = jax.jit(module.apply)({"params": params}, *inputs())
    theirs = run_hf(model, *inputs())
    if kind == "span":
        np.testing.assert_allclose(ours[0], theirs.start_logits.numpy(), atol=1e-5)
        np.testing.assert_allclose(ours[1], theirs.end_logits.numpy(), atol=1e-5)
    else:
        np.testing.assert_allclose(ours, theirs.logits.numpy(), atol=1e-5)


def test_mean_pooled_classifier_is_not_exported_as_a_pooler_classifier(tmp_path):
    module = heads.BertForSequenceClassification(CONFIG, 2, pooling="mean")
    pretrained.save(tmp_path / "ours", CONFIG, random_params(module),
                    tokenizer=WordPieceTokenizer(VOCAB),
                    task={"family": "classification", "label_names": ["a", "b"],
                          "config": {"pooling": "mean"}})
    with pytest.raises(ValueError, match="reads mean-pooled states, but transformers'"):
        cli.convert_main(["--model", str(tmp_path / "ours"), "--to_hf", str(tmp_path / "hf")])
    assert not (tmp_path / "hf").exists()


def test_minilm_export_loads_and_embeds_the_same(tmp_path, minilm_dir):
    source = minilm_dir
    assert cli.convert_main(["--from_hf", source, "--output", str(tmp_path / "ours")]) == 0
    assert cli.convert_main(["--model", str(tmp_path / "ours"),
                             "--to_hf", str(tmp_path / "hf")]) == 0

    exported = load_hf(tmp_path / "hf")
    original = transformers.AutoModel.from_pretrained(source).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    batch = tokenizer(["A man is eating food.", "A man is eating a piece of bread."],
                      padding=True, return_tensors="np")
    arrays = (batch["input_ids"].astype(np.int32), batch["attention_mask"].astype(np.int32),
              batch["token_type_ids"].astype(np.int32))
    theirs = run_hf(exported, *arrays).last_hidden_state.numpy()
    np.testing.assert_array_equal(theirs, run_hf(original, *arrays).last_hidden_state.numpy())

    ours = pretrained.load(tmp_path / "ours")
    out = jax.jit(BertModel(ours.config).apply)({"params": ours.params["bert"]}, *arrays)
    np.testing.assert_allclose(out.sequence_output, theirs, atol=1e-4)
    mask = arrays[1][..., None]
    mean = (theirs * mask).sum(1) / mask.sum(1)
    cosine = mean[0] @ mean[1] / np.linalg.norm(mean[0]) / np.linalg.norm(mean[1])
    assert abs(cosine - 0.755) < 1e-3


def test_multiple_choice_matches_transformers_and_exports_back(tmp_path):
    """BertForMultipleChoice on transformers' weights (scaled as in the parity tests)
    gives transformers' logits for [B, C, L] inputs with padding; exported with --to_hf,
    transformers loads it as BertForMultipleChoice with every weight bit-identical."""
    from bert_jax.weights import hf

    from helpers.parity import scale_weights

    torch.manual_seed(1)
    hf_config = transformers.BertConfig(**to_google_dict(CONFIG))
    original = scale_weights(transformers.BertForMultipleChoice(hf_config).eval())
    state = {k: v.detach().numpy() for k, v in original.state_dict().items()}
    params = hf.params_from_hf(state, CONFIG)

    rng = np.random.default_rng(2)
    ids = rng.integers(5, 40, size=(2, 3, 10)).astype(np.int32)
    mask = (np.arange(10) < rng.integers(3, 11, size=(2, 3, 1))).astype(np.int32)
    segments = (np.arange(10) >= 4).astype(np.int32) * mask
    ids = ids * mask
    ours = np.asarray(jax.jit(heads.BertForMultipleChoice(CONFIG).apply)(
        {"params": params}, ids, mask, segments))
    theirs = run_hf(original, ids, mask, segments).logits.numpy()
    assert ours.shape == (2, 3) and ours.std() > 0.1  # choices scored differently
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)

    pretrained.save(tmp_path / "ours", CONFIG, params, tokenizer=WordPieceTokenizer(VOCAB),
                    task={"name": "swag", "kind": "multiple_choice"})
    assert cli.convert_main(["--model", str(tmp_path / "ours"),
                             "--to_hf", str(tmp_path / "hf")]) == 0
    exported = load_hf(tmp_path / "hf")
    assert type(exported).__name__ == "BertForMultipleChoice"
    after = load_file(tmp_path / "hf" / "model.safetensors")
    assert set(after) == set(state)
    for name, value in after.items():
        assert np.array_equal(value, state[name]), name
    np.testing.assert_array_equal(run_hf(exported, ids, mask, segments).logits.numpy(), theirs)


def test_a_model_without_a_tokenizer_exports_its_weights_and_a_broken_one_is_named(
        tmp_path, capsys):
    from bert_jax.tokenization import TokenizerError
    hf = tmp_path / "hf"
    transformers.BertForPreTraining(transformers.BertConfig(**to_google_dict(CONFIG))) \
        .save_pretrained(hf)
    WordPieceTokenizer(VOCAB).save(str(hf))
    assert cli.convert_main(["--from_hf", str(hf), "--output", str(tmp_path / "ours")]) == 0
    vocab = tmp_path / "ours" / "vocab.txt"
    vocab.unlink()

    assert cli.convert_main(["--model", str(tmp_path / "ours"), "--to_hf",
                             str(tmp_path / "a")]) == 0
    assert "no tokenizer in" in capsys.readouterr().out
    assert (tmp_path / "a" / "model.safetensors").exists()
    assert not (tmp_path / "a" / "vocab.txt").exists()

    vocab.write_text("hello\nworld\n")  # no special tokens: an error, not "no tokenizer"
    with pytest.raises(TokenizerError, match=r"\[CLS\]"):
        cli.convert_main(["--model", str(tmp_path / "ours"), "--to_hf", str(tmp_path / "b")])
    assert not (tmp_path / "b").exists()
