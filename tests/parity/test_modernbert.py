"""The modern encoder options against transformers' ModernBertModel / ModernBertForMaskedLM
on the same random weights (float32), and its HF conversion both ways."""

import jax
import numpy as np
import pytest

from bert_jax.models.config import BertConfig
from bert_jax.models.encoder import BertModel
from bert_jax.models.presets import preset
from bert_jax.weights import hf
from bert_jax.weights.config_json import to_hf_dict

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
transformers = pytest.importorskip("transformers")

from helpers.parity import (  # noqa: E402
    assert_hidden_states_match,
    assert_mlm_model_matches,
    scale_weights,
)
from helpers.parity import state_dict_numpy as state_dict  # noqa: E402
from helpers.tokenizers import bpe_tokenizer_json  # noqa: E402

SIZES = [
    # 4 layers, a global one every 2nd, a 16-token window: rows of 40 tokens reach past it.
    preset("modernbert-tiny").replace(vocab_size=101, hidden_size=32, num_hidden_layers=4,
                                      num_attention_heads=4, intermediate_size=48,
                                      max_position_embeddings=64, local_attention=16,
                                      global_attn_every_n_layers=2),
    # ModernBERT-base's pattern (global every 3rd) over 5 layers, biases on.
    preset("modernbert-tiny").replace(vocab_size=300, hidden_size=96, num_hidden_layers=5,
                                      num_attention_heads=6, intermediate_size=80,
                                      max_position_embeddings=128, local_attention=10,
                                      use_bias=True, norm_bias=True, rope_theta=1000.0,
                                      local_rope_theta=500.0),
]


def reference(config: BertConfig, seed: int):
    """A transformers ModernBertForMaskedLM with every weight random, of a size that keeps
    activations of order one (the LayerNorms included)."""
    torch.manual_seed(seed)
    hf_config = transformers.ModernBertConfig(**to_hf_dict(config))
    hf_config._attn_implementation = "eager"
    model = transformers.ModernBertForMaskedLM(hf_config).eval()
    return scale_weights(model)


def batch(vocab_size, lengths, max_len, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, (len(lengths), max_len)).astype(np.int32)
    mask = (np.arange(max_len)[None] < np.array(lengths)[:, None]).astype(np.int32)
    return ids * mask, mask


UNPADDED, PADDED = [40, 40], [40, 23, 5]
CASES = [pytest.param(0, False, PADDED, id="small-unrolled-padded"),
         pytest.param(0, True, UNPADDED, id="small-scanned-unpadded"),
         pytest.param(1, False, UNPADDED, id="medium-unrolled-unpadded", marks=pytest.mark.slow),
         pytest.param(1, True, PADDED, id="medium-scanned-padded"),
         pytest.param(0, False, UNPADDED, id="small-unrolled-unpadded", marks=pytest.mark.slow),
         pytest.param(1, True, UNPADDED, id="medium-scanned-unpadded", marks=pytest.mark.slow)]


@pytest.mark.long
@pytest.mark.parametrize("size, scan, lengths", CASES)
def test_outputs_match_transformers(size, scan, lengths):
    """Hidden states (every layer's, the last after the final norm) and MLM logits, at
    the real tokens; rows of 40 tokens reach past the local layers' windows."""
    config = SIZES[size].replace(scan_layers=scan)
    ref = reference(config, seed=1)
    ids, mask = batch(config.vocab_size, lengths, 40)
    with torch.no_grad():
        expected = ref(torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       output_hidden_states=True)
        hidden = ref.model(torch.tensor(ids, dtype=torch.long),
                           attention_mask=torch.tensor(mask, dtype=torch.long)).last_hidden_state
    params = hf.params_from_hf(state_dict(ref), config)
    assert_mlm_model_matches(config, params, ids, mask, hidden.numpy(), expected.logits.numpy())
    assert_hidden_states_match(config, params, ids, mask, expected.hidden_states)


def test_export_loads_in_transformers_to_the_same_outputs(tmp_path):
    """save_hf_dir writes config.json + model.safetensors that ModernBertForMaskedLM loads
    to the logits of the model it came from; reading them back gives the same tensors."""
    config = SIZES[1]
    ref = reference(config, seed=2)
    params = hf.params_from_hf(state_dict(ref), config)
    hf.save_hf_dir(tmp_path, config, params)
    loaded = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path, attn_implementation="eager").eval()
    ids, mask = batch(config.vocab_size, [30, 12], 30)
    args = dict(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(mask, dtype=torch.long))
    with torch.no_grad():
        np.testing.assert_allclose(loaded(**args).logits.numpy(), ref(**args).logits.numpy(),
                                   atol=1e-5)
    config_back, params_back = hf.load_hf_dir(tmp_path)
    assert config_back == config
    for a, b in zip(jax.tree.leaves(params_back), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)


def test_tokenizer_json_gives_transformers_ids(tmp_path):
    """A byte-level BPE tokenizer.json (ModernBERT's kind, trained here: no network) read
    with JsonTokenizer gives the ids of transformers' fast tokenizer on the same file."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from bert_jax.tokenization import load_tokenizer

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    corpus = ["The quick brown fox jumps over the lazy dog.", "Naïve café, 3.14 — ok?"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300,
                                                        special_tokens=specials))
    tok.save(str(tmp_path / "tokenizer.json"))
    ours = load_tokenizer(str(tmp_path / "tokenizer.json"))
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    texts = ["The lazy fox.", "  Café naïve 3.14!", "unseen wörds ⚡ [MASK] here"]
    for text in texts:
        assert ours.encode(text).ids == theirs.encode(text, add_special_tokens=False)
    assert ours.encode_ids(texts) == [theirs.encode(t, add_special_tokens=False) for t in texts]
    assert (ours.cls_id, ours.sep_id, ours.mask_id, ours.pad_id) == tuple(
        theirs.convert_tokens_to_ids(["[CLS]", "[SEP]", "[MASK]", "[PAD]"]))
    ours.save(str(tmp_path / "saved"))
    assert load_tokenizer(str(tmp_path / "saved")).encode_ids(texts) == ours.encode_ids(texts)


def test_a_modernbert_on_the_hub_converts_with_its_tokenizer_json(tmp_path, monkeypatch):
    """hf:ORG/NAME of a ModernBERT fetches config.json, the weights and tokenizer.json
    (it has no vocab.txt), and loads to transformers' weights and tokenizer ids."""
    from bert_jax.tokenization import load_tokenizer
    from bert_jax.weights import pretrained

    from helpers.hub_server import HubServer, Repo

    config = SIZES[0].replace(vocab_size=128)
    ref = reference(config, seed=3)
    directory = tmp_path / "hf"
    ref.save_pretrained(directory)
    bpe_tokenizer_json(directory / "tokenizer.json")
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    server = HubServer({"org/modern": Repo({"c" * 40: files}, {"main": "c" * 40})})
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    try:
        loaded = pretrained.load("hf:org/modern")
    finally:
        server.close()
    fetched = sorted(p.rsplit("/", 1)[1] for m, p in server.requests
                     if m == "GET" and "/resolve/" in p)
    assert fetched == ["config.json", "model.safetensors", "tokenizer.json"]
    assert loaded.config == config.replace(hidden_dropout_prob=0.0)
    expected = hf.params_from_hf(state_dict(ref), config)
    jax.tree.map(np.testing.assert_array_equal, dict(loaded.params), expected)
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"))
    text = "the cat ran on a mat"
    assert load_tokenizer(loaded.tokenizer_dir).encode(text).ids == theirs.encode(
        text, add_special_tokens=False)


@pytest.mark.slow  # about a minute: the fine-tuning job end to end
def test_a_converted_modernbert_fine_tunes_and_embeds(tmp_path):
    """convert --from_hf of a ModernBERT directory (tokenizer.json), then a classifier
    fine-tuned from it and the encoder's embeddings: the parts a BERT has, for the modern
    encoder (a pooler of its own, since ModernBERT has none)."""
    from bert_jax import cli

    from helpers.finetune import fine_tune_briefly

    config = SIZES[0].replace(vocab_size=128)
    directory = tmp_path / "hf"
    reference(config, seed=4).save_pretrained(directory)
    bpe_tokenizer_json(directory / "tokenizer.json")
    out = tmp_path / "converted"
    assert cli.main(["convert", "--from_hf", str(directory), "--output", str(out)]) == 0
    results = fine_tune_briefly(out, tmp_path)
    assert 0 <= results["validation"]["accuracy"] <= 1
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat\na dog ran\n", encoding="utf-8")
    vectors = tmp_path / "vectors.npy"
    assert cli.main(["embed", "--model", str(out), "--input", str(texts), "--output",
                     str(vectors), "--pooling", "mean"]) == 0
    assert np.load(vectors).shape == (2, config.hidden_size)


@pytest.mark.long
@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_fused_attention_applies_the_window_as_the_einsum_path(scan):
    """attention_impl="fused" (jax.nn.dot_product_attention with local_window_size; under
    scan a lax.cond between the window and none) gives the einsum path's states on
    right-padded rows longer than the window, and on packed rows (the dense mask)."""
    config = SIZES[0].replace(scan_layers=scan)
    ids, mask = batch(config.vocab_size, [40, 23], 40)
    example_ids = np.where(np.arange(40) < 18, 1, 2)[None].repeat(2, 0) * mask
    model = BertModel(config, add_pooling_layer=False)
    params = model.init(jax.random.PRNGKey(0), ids)["params"]
    fused = BertModel(config.replace(attention_impl="fused"), add_pooling_layer=False)
    real = mask.astype(bool)
    for extra in ({}, {"example_ids": example_ids}):
        want = model.apply({"params": params}, ids, mask, **extra).sequence_output
        got = fused.apply({"params": params}, ids, mask, **extra).sequence_output
        np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-5)
