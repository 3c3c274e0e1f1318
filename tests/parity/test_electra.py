"""ELECTRA (Clark et al., 2020) against transformers' ElectraModel, ElectraForPreTraining
(the discriminator) and ElectraForMaskedLM (the generator) on the same random weights
(float32), its HF conversion both ways, and `hf:` names through the local Hub server."""

import json

import jax
import numpy as np
import pytest

from bert_jax.models.config import BertConfig
from bert_jax.models.heads import ElectraForPreTraining
from bert_jax.weights import hf
from bert_jax.weights.config_json import to_hf_dict

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
transformers = pytest.importorskip("transformers")

from helpers.parity import TOL, assert_mlm_model_matches, scale_weights  # noqa: E402
from helpers.parity import state_dict_numpy as state_dict  # noqa: E402

SIZES = [
    # ELECTRA-Small's shape: embeddings narrower than the layers, projected.
    BertConfig(model_type="electra", pooler_act="gelu", vocab_size=99, embedding_size=16,
               hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=48, max_position_embeddings=96),
    # Base/large's: embeddings as wide as the layers, no projection.
    BertConfig(model_type="electra", pooler_act="gelu", vocab_size=150, hidden_size=48,
               num_hidden_layers=3, num_attention_heads=6, intermediate_size=64,
               max_position_embeddings=96, type_vocab_size=3),
]
UNPADDED, PADDED = [70, 70], [70, 41, 5]  # rows longer than 64 tokens


def reference(config: BertConfig, cls, seed: int):
    torch.manual_seed(seed)
    return scale_weights(cls(transformers.ElectraConfig(**to_hf_dict(config))).eval())


def batch(vocab_size, lengths, max_len=70, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, (len(lengths), max_len)).astype(np.int32)
    mask = (np.arange(max_len)[None] < np.array(lengths)[:, None]).astype(np.int32)
    segments = (np.arange(max_len)[None] >= 20).astype(np.int32) * mask
    return ids * mask, mask, segments


def torch_args(ids, mask, segments):
    return dict(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(mask, dtype=torch.long),
                token_type_ids=torch.tensor(segments, dtype=torch.long))


def test_config_round_trips_and_factorizes_only_a_narrower_width():
    assert hf.from_hf_dict(to_hf_dict(SIZES[0])) == SIZES[0]
    assert to_hf_dict(SIZES[1])["embedding_size"] == 48
    assert hf.from_hf_dict(to_hf_dict(SIZES[1])) == SIZES[1]
    assert SIZES[0].factorized_embeddings and not SIZES[1].factorized_embeddings


@pytest.mark.parametrize("size, scan, lengths", [
    pytest.param(0, False, PADDED, id="factorized-unrolled-padded"),
    pytest.param(0, True, UNPADDED, id="factorized-scanned-unpadded"),
    pytest.param(1, False, UNPADDED, id="wide-unrolled-unpadded"),
    pytest.param(1, True, PADDED, id="wide-scanned-padded", marks=pytest.mark.slow)])
def test_discriminator_matches_transformers(size, scan, lengths):
    """Last hidden states (ElectraModel's) and per-token discriminator logits at the real
    tokens."""
    config = SIZES[size].replace(scan_layers=scan)
    ref = reference(config, transformers.ElectraForPreTraining, seed=1)
    ids, mask, segments = batch(config.vocab_size, lengths)
    with torch.no_grad():
        expected = ref(**torch_args(ids, mask, segments)).logits.numpy()
        hidden = ref.electra(**torch_args(ids, mask, segments)).last_hidden_state.numpy()
    params = hf.params_from_hf(state_dict(ref), config)
    assert set(params) == {"bert", "discriminator"}
    logits, out = ElectraForPreTraining(config).apply({"params": params}, ids, mask, segments)
    real = mask.astype(bool)
    np.testing.assert_allclose(out.sequence_output[real], hidden[real], atol=TOL, rtol=TOL)
    np.testing.assert_allclose(logits[real], expected[real], atol=TOL, rtol=TOL)


@pytest.mark.parametrize("lengths", [
    pytest.param(PADDED, id="padded"),
    pytest.param(UNPADDED, id="unpadded", marks=pytest.mark.slow)])
def test_generator_matches_transformers(lengths):
    """ElectraForMaskedLM's logits from our MLM head: its dense to the embedding width,
    GELU, LayerNorm, the decoder tied to the word embeddings plus its bias."""
    config = SIZES[0]
    ref = reference(config, transformers.ElectraForMaskedLM, seed=2)
    ids, mask, segments = batch(config.vocab_size, lengths)
    with torch.no_grad():
        expected = ref(**torch_args(ids, mask, segments)).logits.numpy()
    params = hf.params_from_hf(state_dict(ref), config)
    assert set(params) == {"bert", "mlm"}
    with torch.no_grad():
        hidden = ref.electra(**torch_args(ids, mask, segments)).last_hidden_state.numpy()
    assert_mlm_model_matches(config, params, ids, mask, hidden, expected, segments)


def test_an_untied_generator_decoder_is_refused():
    ref = reference(SIZES[0], transformers.ElectraForMaskedLM, seed=3)
    state = state_dict(ref)
    state["generator_lm_head.weight"] = state["generator_lm_head.weight"] + 1.0
    with pytest.raises(hf.CheckpointMismatchError, match="not tied"):
        hf.params_from_hf(state, SIZES[0])


@pytest.mark.parametrize("cls", ["ElectraForPreTraining", "ElectraForMaskedLM", "ElectraModel"])
def test_convert_and_to_hf_reload_in_transformers_to_the_same_outputs(cls, tmp_path):
    """convert --from_hf, then convert --model --to_hf: transformers loads the same class
    back (config.json's architectures) to the outputs of the original; the discriminator's
    directory also embeds (mean pooling) to transformers' mean-pooled hidden states."""
    from bert_jax import cli

    config = SIZES[0]
    ref = reference(config, getattr(transformers, cls), seed=4)
    source, converted, back = tmp_path / "hf", tmp_path / "ours", tmp_path / "back"
    ref.save_pretrained(source)
    (source / "vocab.txt").write_text(
        "".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                + [f"w{i}" for i in range(config.vocab_size - 5)]), encoding="utf-8")
    assert cli.main(["convert", "--from_hf", str(source), "--output", str(converted)]) == 0
    assert cli.main(["convert", "--model", str(converted), "--to_hf", str(back)]) == 0
    assert json.loads((back / "config.json").read_text())["architectures"] == [cls]
    loaded = transformers.AutoModel.from_pretrained(back) if cls == "ElectraModel" else \
        getattr(transformers, cls).from_pretrained(back)
    ids, mask, segments = batch(config.vocab_size, PADDED)
    with torch.no_grad():
        theirs, ours = ref(**torch_args(ids, mask, segments)), loaded.eval()(
            **torch_args(ids, mask, segments))
    key = "last_hidden_state" if cls == "ElectraModel" else "logits"
    np.testing.assert_allclose(ours[key].numpy(), theirs[key].numpy(), atol=1e-5)
    if cls != "ElectraForPreTraining":
        return
    texts = tmp_path / "texts.txt"
    texts.write_text("w1 w2 w3\nw7 w8\n", encoding="utf-8")
    vectors = tmp_path / "vectors.npy"
    assert cli.main(["embed", "--model", str(converted), "--input", str(texts), "--output",
                     str(vectors), "--pooling", "mean"]) == 0
    tokenizer = transformers.BertTokenizerFast(str(source / "vocab.txt"), do_lower_case=True)
    encoded = tokenizer(["w1 w2 w3", "w7 w8"], padding=True, return_tensors="pt")
    with torch.no_grad():
        states = ref.electra(**encoded).last_hidden_state
    weights = encoded["attention_mask"][..., None].float()
    expected = ((states * weights).sum(1) / weights.sum(1)).numpy()
    np.testing.assert_allclose(np.load(vectors), expected, atol=TOL, rtol=TOL)


def test_electra_small_discriminator_by_name(tmp_path, monkeypatch):
    """hf:google/electra-small-discriminator (its published config.json shape: E 128 under
    H 256, random weights here) through the local Hub server: fetched, converted, equal."""
    from bert_jax.weights import pretrained

    from helpers.hub_server import HubServer, Repo

    config = SIZES[0].replace(vocab_size=120, embedding_size=128, hidden_size=256,
                              num_attention_heads=4, intermediate_size=1024,
                              max_position_embeddings=512)
    ref = reference(config, transformers.ElectraForPreTraining, seed=5)
    directory = tmp_path / "hf"
    ref.save_pretrained(directory)
    (directory / "vocab.txt").write_text(
        "".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                + [f"w{i}" for i in range(config.vocab_size - 5)]), encoding="utf-8")
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    server = HubServer({"google/electra-small-discriminator":
                        Repo({"e" * 40: files}, {"main": "e" * 40})})
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    try:
        loaded = pretrained.load("hf:google/electra-small-discriminator")
    finally:
        server.close()
    assert loaded.config.model_type == "electra" and loaded.config.embedding_size == 128
    expected = hf.params_from_hf(state_dict(ref), config)
    jax.tree.map(np.testing.assert_array_equal, dict(loaded.params), expected)
