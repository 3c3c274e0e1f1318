"""ALBERT: our encoder and heads against transformers' PyTorch ALBERT on the same random
weights (fp32; no real ALBERT weights are available offline), the layer sharing in both
layouts, the presets' sizes, and conversion both ways."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.models import layer_layout
from bert_jax.models.config import BertConfig, ConfigError
from bert_jax.models.encoder import BertModel, count_params
from bert_jax.models.heads import (
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bert_jax.models.presets import preset
from bert_jax.weights import hf, pretrained
from bert_jax.weights.config_json import to_hf_dict

from helpers.parity import TOL, padded_batch, state_dict_numpy  # noqa: E402

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
transformers = pytest.importorskip("transformers")
from helpers.parity import ALBERT, albert_reference  # noqa: E402

# Two groups of two layers, each group applied twice: every sharing path at once.
GROUPED = ALBERT.replace(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2,
                         hidden_act="gelu")


def torch_inputs(ids, mask, segments):
    return dict(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(mask, dtype=torch.long),
                token_type_ids=torch.tensor(segments, dtype=torch.long))


@pytest.mark.parametrize("config", [ALBERT, GROUPED], ids=["shared", "grouped"])
@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_pretraining_outputs_match_transformers(config, scan):
    config = config.replace(scan_layers=scan)
    ref = albert_reference(config)
    ids, mask, segments = padded_batch(config.vocab_size, [17, 9, 3], 24)
    with torch.no_grad():
        expected = ref(**torch_inputs(ids, mask, segments), output_hidden_states=True,
                       output_attentions=True)
    params = hf.params_from_hf(state_dict_numpy(ref), config)
    out = BertForPreTraining(config).apply({"params": params}, ids, mask, segments)
    np.testing.assert_allclose(out.mlm_logits, expected.prediction_logits.numpy(), atol=TOL)
    np.testing.assert_allclose(out.nsp_logits, expected.sop_logits.numpy(), atol=TOL)
    np.testing.assert_allclose(out.encoder.sequence_output, expected.hidden_states[-1].numpy(),
                               atol=TOL)
    encoder = BertModel(config, output_hidden_states=True, output_attentions=True).apply(
        {"params": params["bert"]}, ids, mask, segments)
    assert len(encoder.hidden_states) == len(expected.hidden_states) == config.depth + 1
    for ours, theirs in zip(encoder.hidden_states, expected.hidden_states):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=TOL)
    real = mask.astype(bool)[:, None, :, None]
    assert len(encoder.attentions) == len(expected.attentions) == config.depth
    for ours, theirs in zip(encoder.attentions, expected.attentions):
        np.testing.assert_allclose(np.where(real, ours, 0), np.where(real, theirs, 0), atol=TOL)


def test_layers_share_one_set_of_parameters_scanned_or_not():
    """Scanned, the group's parameters are broadcast over the steps, not stacked: both
    layouts hold the same G * K layers, with the same shapes."""
    shapes = {}
    for scan in (False, True):
        config = GROUPED.replace(scan_layers=scan)
        variables = jax.eval_shape(BertModel(config).init, jax.random.key(0),
                                   np.ones((1, 4), np.int32))
        params = nn.unbox(variables["params"])
        shapes[scan] = jax.tree.map(lambda x: x.shape, params)
        assert sorted(params["encoder"]) == ["group_0", "group_1"]
        assert sorted(params["encoder"]["group_0"]) == ["layer_0", "layer_1"]
    assert shapes[False] == shapes[True]
    assert shapes[True]["encoder"]["group_0"]["layer_0"]["attention"]["query"]["kernel"] == (
        32, 4, 8)


@pytest.mark.parametrize("name", ["albert-base-v2", "albert-large-v2", "albert-tiny-zh"])
def test_presets_are_as_large_as_transformers_albert(name):
    """albert-base-v2 is transformers' 11.7M-parameter AlbertModel (pooler included)."""
    config = preset(name)
    params = jax.eval_shape(BertModel(config).init, jax.random.key(0), np.ones((1, 4), np.int32))
    theirs = transformers.AlbertModel(transformers.AlbertConfig(**to_hf_dict(config)))
    assert count_params(nn.unbox(params)) == sum(p.numel() for p in theirs.parameters())
    if name == "albert-base-v2":
        assert count_params(nn.unbox(params)) == 11_683_584


def test_albert_fields_are_checked():
    with pytest.raises(ConfigError, match="model_type='albert'"):
        BertConfig(embedding_size=128)
    with pytest.raises(ConfigError, match="not a multiple of num_hidden_groups"):
        ALBERT.replace(num_hidden_groups=2)
    with pytest.raises(ConfigError, match="embedding_size must be a positive integer"):
        BertConfig(model_type="albert")


@pytest.mark.parametrize("cls, ours, kwargs", [
    ("AlbertForSequenceClassification", BertForSequenceClassification, {"num_labels": 3}),
    ("AlbertForTokenClassification", BertForTokenClassification, {"num_labels": 5}),
    ("AlbertForQuestionAnswering", BertForQuestionAnswering, {}),
])
def test_task_heads_match_transformers(cls, ours, kwargs):
    ref = albert_reference(ALBERT, getattr(transformers, cls), seed=3, **kwargs)
    ids, mask, segments = padded_batch(ALBERT.vocab_size, [12, 5], 12, seed=2)
    with torch.no_grad():
        expected = ref(**torch_inputs(ids, mask, segments))
    params = hf.params_from_hf(state_dict_numpy(ref), ALBERT)
    out = ours(ALBERT, **kwargs).apply({"params": params}, ids, mask, segments)
    if cls.endswith("QuestionAnswering"):
        np.testing.assert_allclose(out[0], expected.start_logits.numpy(), atol=TOL)
        np.testing.assert_allclose(out[1], expected.end_logits.numpy(), atol=TOL)
    else:
        np.testing.assert_allclose(out, expected.logits.numpy(), atol=TOL)


def test_state_dict_round_trip_and_transformers_reads_ours(tmp_path):
    ref = albert_reference(ALBERT, transformers.AlbertForMaskedLM, seed=5)
    state = state_dict_numpy(ref)
    params = hf.params_from_hf(state, ALBERT)
    back = hf.params_to_hf(params, ALBERT)
    for name, value in back.items():
        np.testing.assert_array_equal(value, state[name], err_msg=name)
    hf.save_hf_dir(tmp_path, ALBERT, params, "AlbertForMaskedLM")
    loaded = transformers.AlbertForMaskedLM.from_pretrained(tmp_path).eval()
    ids, mask, segments = padded_batch(ALBERT.vocab_size, [9, 4], 10, seed=6)
    with torch.no_grad():
        np.testing.assert_allclose(loaded(**torch_inputs(ids, mask, segments)).logits.numpy(),
                                   ref(**torch_inputs(ids, mask, segments)).logits.numpy(),
                                   atol=1e-5)
    config, reread = hf.load_hf_dir(tmp_path)
    assert config == ALBERT
    jax.tree.map(np.testing.assert_array_equal, reread, layer_layout.to_unscanned(params))


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_convert_embed_and_back_to_transformers(tmp_path):
    """An HF AlbertForPreTraining directory (albert_zh-style, WordPiece vocab.txt) converts,
    embeds like transformers' AlbertModel, and exports back to a directory transformers
    reads with the same outputs."""
    from bert_jax import cli

    ref = albert_reference(ALBERT, seed=7)
    hf_dir, model_dir, back = tmp_path / "hf", tmp_path / "model", tmp_path / "back"
    ref.save_pretrained(hf_dir)
    words = [f"w{i}" for i in range(ALBERT.vocab_size - len(SPECIALS))]
    (hf_dir / "vocab.txt").write_text("\n".join(SPECIALS + words) + "\n")
    assert cli.main(["convert", "--from_hf", str(hf_dir), "--output", str(model_dir)]) == 0
    assert pretrained.load(model_dir).config == ALBERT

    texts = tmp_path / "texts.txt"
    texts.write_text("w1 w2 w3 w4\nw5 w6\n")
    vectors = tmp_path / "vectors.npy"
    assert cli.main(["embed", "--model", str(model_dir), "--input", str(texts),
                     "--output", str(vectors), "--pooling", "mean"]) == 0
    ids = np.array([[2, 6, 7, 8, 9, 3], [2, 10, 11, 3, 0, 0]])
    mask = (ids > 0).astype(np.int64)
    with torch.no_grad():
        states = ref.albert(**torch_inputs(ids, mask, 0 * ids)).last_hidden_state.numpy()
    expected = (states * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(np.load(vectors), expected, atol=TOL)

    assert cli.main(["convert", "--model", str(model_dir), "--to_hf", str(back)]) == 0
    again = transformers.AlbertForPreTraining.from_pretrained(back).eval()
    with torch.no_grad():
        np.testing.assert_allclose(
            again(**torch_inputs(ids, mask, 0 * ids)).prediction_logits.numpy(),
            ref(**torch_inputs(ids, mask, 0 * ids)).prediction_logits.numpy(), atol=1e-5)


def test_an_empty_spiece_model_is_refused_in_one_line(tmp_path, capsys):
    from bert_jax import cli

    albert_reference(ALBERT, transformers.AlbertModel).save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "spiece.model").write_bytes(b"")
    assert cli.main(["convert", "--from_hf", str(tmp_path / "hf"), "--output",
                     str(tmp_path / "out")]) == 2
    assert "spiece.model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_finetunes_and_predicts(tmp_path):
    """A random micro ALBERT fine-tuned on a CSV task: the shared layer trains, the best
    model is an ALBERT and predicts."""
    from bert_jax.finetune import inference, job

    from helpers.finetune import micro_config

    positive = ["a wonderful film", "great acting", "i loved it", "the best film"]
    negative = ["a dull mess", "boring and long", "i hated it", "the worst film"]
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tsentiment\n" + "".join(
        f"{t}\t{label}\n" for ts, label in ((positive, "pos"), (negative, "neg")) for t in ts))
    model = ("{'preset': 'albert-base-v2', 'num_hidden_layers': 2, 'hidden_size': 32, "
             "'num_attention_heads': 2, 'intermediate_size': 64, 'embedding_size': 16}")
    config = micro_config("csv", f"model={model}", f"train_file={path}",
                          f"validation_file={path}", "text_column=sentence",
                          "label_column=sentiment", "num_train_epochs=2")
    results = job.finetune(config, str(tmp_path / "run"))
    assert np.isfinite(results["validation"]["accuracy"])
    best = pretrained.load(str(tmp_path / "run" / "best"))
    assert best.config.model_type == "albert" and best.config.embedding_size == 16
    assert sorted(best.params["bert"]["encoder"]) == ["group_0"]
    [record] = inference.load_finetuned(str(tmp_path / "run")).predict(["a great film"])
    assert record["label"] in ("pos", "neg")


def test_flops_count_every_applied_layer():
    """Sharing saves parameters, not FLOPs: 2 layers applied twice cost 4 layers, plus the
    E -> H projection."""
    from bert_jax.train import perf
    bert = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                      intermediate_size=64)
    albert = bert.replace(model_type="albert", embedding_size=32, num_hidden_layers=2,
                          inner_group_num=2)
    extra = perf.forward_flops_per_example(albert, 16, 4) - perf.forward_flops_per_example(
        bert, 16, 4)
    assert extra == 16 * 2 * 32 * 32


@pytest.mark.slow
def test_gradients_are_the_same_scanned_rematerialised_or_unrolled():
    """The scanned groups accumulate one gradient per shared parameter over their steps."""
    ids, mask, segments = padded_batch(GROUPED.vocab_size, [7, 4], 7)
    params = nn.unbox(BertModel(GROUPED).init(jax.random.key(0), ids)["params"])

    def grads(config):
        loss = lambda p: BertModel(config).apply({"params": p}, ids, mask,
                                                 segments).sequence_output.sum()
        return jax.grad(loss)(params)

    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                 grads(GROUPED.replace(scan_layers=True, remat_policy="full")), grads(GROUPED))
