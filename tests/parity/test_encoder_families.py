"""RoBERTa, XLM-R, CamemBERT and DistilBERT against transformers' own classes on the same
random weights (float32): hidden states, MLM logits and each family's sequence classifier;
the conversion both ways, and `hf:` names through the local Hub server.

RoBERTa's family is BERT with positions counted after the padding id (row i + 2 for
position i); DistilBERT is BERT without token types or pooler (its classifiers'
`pre_classifier` + ReLU is our pooler with relu)."""

import json

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.models.config import BertConfig
from bert_jax.models.heads import BertForPreTraining, BertForSequenceClassification
from bert_jax.weights import hf
from bert_jax.weights.config_json import to_hf_dict

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
transformers = pytest.importorskip("transformers")

from helpers.parity import TOL, assert_mlm_model_matches, scale_weights  # noqa: E402
from helpers.parity import state_dict_numpy as state_dict  # noqa: E402

_SMALL = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=48)
CONFIGS = {
    "roberta": BertConfig(model_type="roberta", max_position_embeddings=98, type_vocab_size=1,
                          position_offset=2, layer_norm_eps=1e-5, **_SMALL),
    "xlm-roberta": BertConfig(model_type="xlm-roberta", max_position_embeddings=98,
                              type_vocab_size=1, position_offset=2, **_SMALL),
    "camembert": BertConfig(model_type="camembert", max_position_embeddings=98,
                            type_vocab_size=1, position_offset=2, **_SMALL),
    "distilbert": BertConfig(model_type="distilbert", max_position_embeddings=96,
                             type_vocab_size=0, pooler_act="relu", **_SMALL),
}
CLASSES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert",
           "distilbert": "DistilBert"}
# The vocabulary sizes of test_family_tokenizers' tokenizer files, per family.
TOKENIZER_SIZES = {"roberta": 400, "xlm-roberta": 202, "camembert": 205, "distilbert": 300}
UNPADDED, PADDED = [70, 70], [70, 41, 5]  # rows longer than 64 tokens
PAD = 1  # RoBERTa's padding id, from which transformers counts its positions


def reference(family: str, kind: str, seed: int, **config):
    torch.manual_seed(seed)
    hf_config = transformers.AutoConfig.for_model(**{**to_hf_dict(CONFIGS[family]), **config})
    cls = getattr(transformers, f"{CLASSES[family]}{kind}")
    return scale_weights(cls(hf_config).eval())


def batch(vocab_size, lengths, max_len=70, seed=0):
    """ids (never the padding id at real tokens, the padding id after them), mask, and
    segment ids that these families ignore."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab_size, (len(lengths), max_len)).astype(np.int32)
    mask = (np.arange(max_len)[None] < np.array(lengths)[:, None]).astype(np.int32)
    segments = (np.arange(max_len)[None] >= 20).astype(np.int32) * mask
    return np.where(mask == 1, ids, PAD), mask, segments


def torch_args(ids, mask):
    return dict(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(mask, dtype=torch.long))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_config_round_trips(family):
    config = CONFIGS[family]
    assert hf.from_hf_dict(to_hf_dict(config)) == config
    assert config.max_positions == 96


@pytest.mark.parametrize("family, scan, lengths", [
    pytest.param("roberta", False, PADDED, id="roberta-unrolled-padded"),
    pytest.param("xlm-roberta", True, UNPADDED, id="xlm-roberta-scanned-unpadded"),
    pytest.param("camembert", True, PADDED, id="camembert-scanned-padded",
                 marks=pytest.mark.slow),
    pytest.param("distilbert", False, PADDED, id="distilbert-unrolled-padded"),
    pytest.param("distilbert", True, UNPADDED, id="distilbert-scanned-unpadded")])
def test_hidden_states_and_mlm_logits_match_transformers(family, scan, lengths):
    """The last hidden states (the base model's) and the MLM logits at the real tokens."""
    config = CONFIGS[family].replace(scan_layers=scan)
    ref = reference(family, "ForMaskedLM", seed=1)
    ids, mask, segments = batch(config.vocab_size, lengths)
    with torch.no_grad():
        expected = ref(**torch_args(ids, mask)).logits.numpy()
        hidden = ref.base_model(**torch_args(ids, mask)).last_hidden_state.numpy()
    params = hf.params_from_hf(state_dict(ref), config)
    assert set(params) == {"bert", "mlm"}
    assert_mlm_model_matches(config, params, ids, mask, hidden, expected, segments)


@pytest.mark.parametrize("family", ["roberta", "distilbert", "electra"])
def test_sequence_classifier_matches_transformers_and_goes_back(family, tmp_path):
    """Each family's *ForSequenceClassification: a dense + tanh (RoBERTa), ReLU
    (DistilBERT's pre_classifier) or GELU (ELECTRA) on the first token, then the
    classifier: our pooler (`pooler_act`) and classifier, to the same logits, and written
    back as the same class with the same outputs."""
    if family == "electra":
        config = BertConfig(model_type="electra", embedding_size=16, pooler_act="gelu",
                            max_position_embeddings=96, **_SMALL)
        torch.manual_seed(2)
        ref = scale_weights(transformers.ElectraForSequenceClassification(
            transformers.ElectraConfig(**to_hf_dict(config), num_labels=3)).eval())
        cls = "ElectraForSequenceClassification"
    else:
        config = CONFIGS[family]
        ref = reference(family, "ForSequenceClassification", seed=2, num_labels=3)
        cls = f"{CLASSES[family]}ForSequenceClassification"
    ids, mask, segments = batch(config.vocab_size, PADDED)
    if family == "electra":  # its token types count: the reference is given none
        segments = np.zeros_like(segments)
    with torch.no_grad():
        expected = ref(**torch_args(ids, mask)).logits.numpy()
    params = hf.params_from_hf(state_dict(ref), config)
    assert set(params) == {"bert", "classifier"} and "pooler" in params["bert"]
    logits = BertForSequenceClassification(config, num_labels=3).apply(
        {"params": params}, ids, mask, segments)
    np.testing.assert_allclose(logits, expected, atol=TOL, rtol=TOL)

    hf.save_hf_dir(tmp_path, config, params, cls,
                   {"id2label": {i: f"LABEL_{i}" for i in range(3)}})
    loaded = getattr(transformers, cls).from_pretrained(tmp_path).eval()
    with torch.no_grad():
        np.testing.assert_allclose(loaded(**torch_args(ids, mask)).logits.numpy(), expected,
                                   atol=1e-5)


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_to_hf_reloads_in_transformers_to_the_same_outputs(family, tmp_path):
    """`convert --from_hf` of a transformers-saved MaskedLM with its tokenizer files, then
    `--to_hf`: transformers loads the family's class back to the same logits, with
    tokenizer files that give its ids and a model_max_length of the positions served."""
    from bert_jax import cli

    from helpers.tokenizers import family_files

    vocab_size = TOKENIZER_SIZES[family]
    ref = reference(family, "ForMaskedLM", seed=3, vocab_size=vocab_size)
    source, converted, back = tmp_path / "hf", tmp_path / "ours", tmp_path / "back"
    ref.save_pretrained(source)
    family_files(family, source)
    assert cli.main(["convert", "--from_hf", str(source), "--output", str(converted)]) == 0
    assert cli.main(["convert", "--model", str(converted), "--to_hf", str(back)]) == 0
    written = json.loads((back / "config.json").read_text())
    assert written["architectures"] == [f"{CLASSES[family]}ForMaskedLM"]
    loaded = transformers.AutoModelForMaskedLM.from_pretrained(back).eval()
    ids, mask, _ = batch(vocab_size, PADDED)
    with torch.no_grad():
        theirs, ours = ref(**torch_args(ids, mask)), loaded(**torch_args(ids, mask))
    np.testing.assert_allclose(ours.logits.numpy(), theirs.logits.numpy(), atol=1e-5)
    tokenizer_config = json.loads((back / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == CONFIGS[family].max_positions


def test_roberta_has_no_next_sentence_head_so_it_is_left_out(tmp_path):
    from bert_jax.weights import pretrained
    from bert_jax.weights.convert import to_hf

    config = CONFIGS["roberta"]
    model = BertForPreTraining(config)
    # zeros of the model's shapes (traced, not initialised): the heads written are the claim
    params = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0),
                                          np.ones((1, 8), np.int32)))
    pretrained.save(str(tmp_path / "m"), config,
                    jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), params["params"]))
    notes = to_hf(str(tmp_path / "m"), str(tmp_path / "hf"))
    assert any("nsp was left out" in note for note in notes), notes
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["architectures"] == ["RobertaForMaskedLM"]


def test_positions_past_the_offset_table_are_refused():
    from bert_jax.models.config import ConfigError, check_inputs_fit

    with pytest.raises(ConfigError, match="exceeds the max_position_embeddings 98 less "
                                          "position_offset 2"):
        check_inputs_fit(CONFIGS["roberta"], "roberta", max_seq_length=97)
    check_inputs_fit(CONFIGS["roberta"], "roberta", max_seq_length=96)


def test_the_published_names_load_with_their_tokenizers(tmp_path, monkeypatch):
    """hf:FacebookAI/roberta-base, hf:FacebookAI/xlm-roberta-base and
    hf:distilbert/distilbert-base-uncased (small random models with their families'
    tokenizer files) through the local Hub server: the weights as converted, and the
    tokenizer to transformers' ids."""
    from bert_jax.tokenization import load_tokenizer
    from bert_jax.weights import pretrained

    from helpers.hub_server import HubServer, Repo
    from helpers.tokenizers import family_files

    names = {"FacebookAI/roberta-base": "roberta-json",
             "FacebookAI/xlm-roberta-base": "xlm-roberta",
             "distilbert/distilbert-base-uncased": "distilbert"}
    repos, models = {}, {}
    for seed, (name, files) in enumerate(names.items()):
        family = files.replace("-json", "")
        directory = tmp_path / family
        directory.mkdir()
        family_files(files, directory)
        ref = reference(family, "ForMaskedLM", seed, vocab_size=TOKENIZER_SIZES[family])
        ref.save_pretrained(directory)
        repos[name] = Repo({"c" * 40: {p.name: p.read_bytes() for p in directory.iterdir()}},
                           {"main": "c" * 40})
        models[name] = ref, directory
    server = HubServer(repos)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    text = "Hello world, café 中文 😀"
    try:
        for name, (ref, directory) in models.items():
            loaded = pretrained.load(f"hf:{name}")
            expected = hf.params_from_hf(state_dict(ref), loaded.config)
            jax.tree.map(np.testing.assert_array_equal, dict(loaded.params), expected)
            theirs = transformers.AutoTokenizer.from_pretrained(directory)
            assert load_tokenizer(loaded.tokenizer_dir).encode(text).ids == theirs(
                text, add_special_tokens=False)["input_ids"], name
    finally:
        server.close()
