"""`bert-jax embed --per_token`: per-token features of chosen layers, combined, against
transformers' BertModel(output_hidden_states=True) on the same weights."""

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.models import layer_layout
from bert_jax.models.config import BertConfig
from bert_jax.serve.embed import token_features
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.weights import hf, pretrained
from bert_jax.weights.config_json import to_hf_dict

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
transformers = pytest.importorskip("transformers")
from helpers.parity import scale_weights, state_dict_numpy  # noqa: E402

CONFIG = BertConfig(vocab_size=8192, hidden_size=32, num_hidden_layers=3,
                    num_attention_heads=4, intermediate_size=48, max_position_embeddings=64)
TEXTS = ["The quick brown fox jumps over the lazy dog.", "",
         "unaffable tokenization splits words", "a"]


@pytest.fixture(scope="module")
def reference():
    """(transformers BertModel with random order-one weights, our Pretrained of it)."""
    torch.manual_seed(0)
    ref = scale_weights(transformers.BertModel(
        transformers.BertConfig(**to_hf_dict(CONFIG))).eval())
    params = hf.params_from_hf(state_dict_numpy(ref), CONFIG)
    return ref, pretrained.Pretrained(CONFIG, params, None, DEFAULT_VOCAB)


@pytest.fixture(scope="module")
def model_dir(reference, tmp_path_factory):
    directory = tmp_path_factory.mktemp("embed") / "model"
    pretrained.save(directory, CONFIG, reference[1].params,
                    tokenizer=load_tokenizer(DEFAULT_VOCAB))
    return directory


def reference_states(ref, tokenizer, texts):
    """Per text, transformers' hidden states [layers + 1, tokens, H] of [CLS] text [SEP]."""
    out = []
    for text in texts:
        ids = [tokenizer.cls_id, *tokenizer.encode(text).ids, tokenizer.sep_id]
        with torch.no_grad():
            hidden = ref(torch.tensor([ids]), output_hidden_states=True).hidden_states
        out.append(np.stack([h[0].numpy() for h in hidden]))
    return out


@pytest.mark.long
@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_layers_and_combinations_match_transformers(reference, scan):
    ref, model = reference
    if scan:
        model = pretrained.Pretrained(CONFIG.replace(scan_layers=True),
                                      layer_layout.to_scanned(model.params), None, DEFAULT_VOCAB)
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    expected = reference_states(ref, tokenizer, TEXTS)
    last4 = [-4, -3, -2, -1]
    for combine, layers, reduce in (
            ("sum", last4, lambda h: h[-4:].sum(0)),
            ("mean", last4, lambda h: h[-4:].mean(0)),
            ("concat", last4, lambda h: np.concatenate(list(h[-4:]), -1)),
            ("sum", [-1], lambda h: h[-1]),
            ("sum", [0], lambda h: h[0]),                       # the embeddings
            ("concat", [2, 0], lambda h: np.concatenate([h[2], h[0]], -1))):
        feats = token_features(model, TEXTS, layers=layers, combine=combine, batch_size=3,
                               max_seq_length=32)
        want = np.concatenate([reduce(h) for h in expected])
        width = CONFIG.hidden_size * (len(layers) if combine == "concat" else 1)
        assert feats["vectors"].shape == (len(want), width)
        np.testing.assert_allclose(feats["vectors"], want, atol=1e-5, rtol=1e-5,
                                   err_msg=f"{combine} {layers}")


def test_cli_writes_tokens_line_index_and_vectors(reference, model_dir, tmp_path, capsys):
    _, model = reference
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "feats.npz"
    assert cli.main(["embed", "--model", str(model_dir), "--input", str(texts),
                     "--output", str(out), "--per_token", "--layers", "-4,-3,-2,-1",
                     "--combine", "concat", "--batch_size", "2"]) == 0
    assert "to " + str(out) in capsys.readouterr().out
    with np.load(out) as f:  # no pickled objects: loads without allow_pickle
        vectors, line_index, tokens = f["vectors"], f["line_index"], f["tokens"]
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    want_tokens = [t for text in TEXTS
                   for t in ["[CLS]", *tokenizer.encode(text).tokens, "[SEP]"]]
    assert tokens.tolist() == want_tokens
    assert line_index.tolist() == [i for i, text in enumerate(TEXTS)
                                   for _ in range(len(tokenizer.encode(text).ids) + 2)]
    assert vectors.shape == (len(want_tokens), 4 * CONFIG.hidden_size)
    assert vectors.dtype == np.float32
    # concat of last four = the four single layers side by side, in order
    single = token_features(model, TEXTS, layers=[-2], max_seq_length=128)["vectors"]
    np.testing.assert_allclose(vectors[:, 2 * 32:3 * 32], single, atol=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--per_token", "--layers", "4"], "--layers 4 is out of range for a model with 3 layers"),
    (["--per_token", "--layers", "-5"], "--layers -5 is out of range"),
    (["--per_token", "--layers", "-1,x"], "--layers takes comma-separated integers"),
    (["--per_token", "--layers", "-2,-1"], "--layers names 2 layers: say how to combine"),
    (["--combine", "sum"], "--combine is for --per_token features"),
    (["--layers", "-1"], "--layers is for --per_token features"),
    (["--per_token", "--pooling", "mean"], "--pooling is for sentence vectors"),
    (["--per_token", "--output", "{tmp}/feats.npy"], "--output must end in .npz"),
    (["--per_token", "--input", "{tmp}/empty.txt"], "empty.txt has no lines"),
])
def test_bad_per_token_arguments(model_dir, tmp_path, capsys, args, message):
    (tmp_path / "texts.txt").write_text("one line\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    base = {"--model": str(model_dir), "--input": str(tmp_path / "texts.txt"),
            "--output": str(tmp_path / "feats.npz")}
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    for flag in ("--input", "--output"):
        if flag in args:
            base[flag] = args.pop(args.index(flag) + 1)
            args.remove(flag)
    argv = ["embed", *[x for kv in base.items() for x in kv], *args]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-jax embed: error: ") and message in err, err
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".npz", ".npy")]
