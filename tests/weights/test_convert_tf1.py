"""`bert-jax convert --from_tf1`: a checkpoint written with Google's TF1 variable names
converts and matches transformers' BertForPreTraining on the same weights."""

import json
import os

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tf = pytest.importorskip("tensorflow")

from bert_jax.models.heads import BertForPreTraining, BertForSequenceClassification  # noqa: E402
from bert_jax.tokenization import load_tokenizer  # noqa: E402
from bert_jax.weights import cli, pretrained  # noqa: E402
from bert_jax.weights.hf import CheckpointMismatchError  # noqa: E402

from helpers.parity import scale_weights  # noqa: E402
from helpers.tf1 import GOOGLE_CONFIG, google_names, write_tf1_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def reference():
    """A random transformers BertForPreTraining and its weights under Google's names,
    with Adam slots and global_step as in a real pretraining checkpoint.

    Weights are scaled as in the parity tests (activations of order one): with BERT's
    0.02 init a query kernel written untransposed (square, so it loads) still matched
    within 1e-4; with these weights test_tf1_checkpoint_matches_transformers fails for
    it (checked once)."""
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(transformers.BertConfig(**GOOGLE_CONFIG)).eval()
    scale_weights(model)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    variables = {}
    for hf_name, (name, transposed) in google_names().items():
        value = state[hf_name]
        variables[name] = np.ascontiguousarray(value.T if transposed else value)
        variables[name + "/adam_m"] = np.zeros_like(variables[name])
        variables[name + "/adam_v"] = np.zeros_like(variables[name])
    variables["global_step"] = np.int64(1000)
    return model, variables


def write_google_dir(directory, variables):
    os.makedirs(directory, exist_ok=True)
    write_tf1_checkpoint(os.path.join(directory, "bert_model.ckpt"), variables)
    with open(os.path.join(directory, "bert_config.json"), "w") as f:
        json.dump(GOOGLE_CONFIG, f)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += [f"w{i}" for i in range(GOOGLE_CONFIG["vocab_size"] - len(words))]
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(words) + "\n")
    return directory


def test_tf1_checkpoint_matches_transformers(reference, tmp_path):
    model, variables = reference
    google = write_google_dir(tmp_path / "uncased_L-2_H-32_A-4", variables)
    out = tmp_path / "converted"
    assert cli.convert_main(["--from_tf1", str(google), "--output", str(out)]) == 0

    loaded = pretrained.load(out)
    assert loaded.config.vocab_size == 40 and set(loaded.params) == {"bert", "mlm", "nsp"}
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 40, size=(2, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    segments = np.zeros_like(ids)
    segments[:, 6:] = 1
    ours = jax.jit(BertForPreTraining(loaded.config).apply)({"params": loaded.params}, ids,
                                                            mask, segments)
    with torch.no_grad():
        theirs = model(input_ids=torch.from_numpy(ids).long(),
                       attention_mask=torch.from_numpy(mask).long(),
                       token_type_ids=torch.from_numpy(segments).long())
    np.testing.assert_allclose(ours.mlm_logits, theirs.prediction_logits.numpy(), atol=1e-4)
    np.testing.assert_allclose(ours.nsp_logits, theirs.seq_relationship_logits.numpy(),
                               atol=1e-4)


def _convert_fails(tmp_path, variables, match):
    google = write_google_dir(tmp_path / "google", variables)
    out = tmp_path / "out"
    with pytest.raises((CheckpointMismatchError, FileNotFoundError), match=match):
        cli.convert_main(["--from_tf1", str(google), "--output", str(out)])
    assert not out.exists()
    return google


def test_unknown_variable_is_named(reference, tmp_path):
    _, variables = reference
    variables = dict(variables)
    variables["bert/encoder/layer_0/attention/self/qurey/kernel"] = variables.pop(
        "bert/encoder/layer_0/attention/self/query/kernel")
    _convert_fails(tmp_path, variables,
                   r"(?s)unknown variable bert/encoder/layer_0/attention/self/qurey/kernel.*"
                   r"missing variable bert/encoder/layer_0/attention/self/query/kernel")


def test_shape_mismatch_is_named(reference, tmp_path):
    _, variables = reference
    variables = dict(variables, **{"cls/predictions/output_bias": np.zeros(41, np.float32)})
    _convert_fails(tmp_path, variables, r"variable cls/predictions/output_bias has shape "
                                        r"\(41,\), the config implies \(40,\)")


def test_missing_index_file_is_reported(reference, tmp_path):
    _, variables = reference
    google = write_google_dir(tmp_path / "google", variables)
    os.remove(google / "bert_model.ckpt.index")
    with pytest.raises(FileNotFoundError, match=r"bert_model\.ckpt\.data-00000-of-00001 is "
                                                r"there but its \.index file is missing"):
        cli.convert_main(["--from_tf1", str(google), "--output", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_truncated_data_shard_names_the_variable(reference, tmp_path):
    _, variables = reference
    google = write_google_dir(tmp_path / "google", variables)
    with open(google / "bert_model.ckpt.data-00000-of-00001", "r+b") as f:
        f.truncate(1000)
    with pytest.raises(CheckpointMismatchError, match=r"cannot read variable bert/\S+ from "):
        cli.convert_main(["--from_tf1", str(google), "--output", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_run_classifier_checkpoint_converts_with_its_head(reference, tmp_path):
    """run_classifier.py saves the encoder plus top-level output_weights [C, H] and
    output_bias [C]; the converted model is a 3-way sequence classifier."""
    model, variables = reference
    rng = np.random.default_rng(1)
    variables = {k: v for k, v in variables.items() if not k.startswith("cls/")}
    variables["output_weights"] = 0.1 * rng.standard_normal((3, 32), np.float32)
    variables["output_bias"] = 0.1 * rng.standard_normal(3, np.float32)
    google = write_google_dir(tmp_path / "google", variables)
    assert cli.convert_main(["--from_tf1", str(google), "--output", str(tmp_path / "out")]) == 0

    loaded = pretrained.load(tmp_path / "out")
    assert loaded.task["kind"] == "classification" and loaded.task["num_labels"] == 3
    classifier = transformers.BertForSequenceClassification(
        transformers.BertConfig(**GOOGLE_CONFIG, num_labels=3)).eval()
    state = {k: v for k, v in model.state_dict().items() if k.startswith("bert.")}
    state["classifier.weight"] = torch.from_numpy(variables["output_weights"])
    state["classifier.bias"] = torch.from_numpy(variables["output_bias"])
    classifier.load_state_dict(state, strict=True)
    ids = np.array([[2, 7, 9, 11, 3, 0]], np.int32)
    mask = (ids > 0).astype(np.int32)
    ours = jax.jit(BertForSequenceClassification(loaded.config, 3).apply)(
        {"params": loaded.params}, ids, mask)
    with torch.no_grad():
        theirs = classifier(input_ids=torch.from_numpy(ids).long(),
                            attention_mask=torch.from_numpy(mask).long()).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


@pytest.mark.parametrize("flag, lower, warning", [
    ("--cased", False, ""), ("--do_lower_case", True, ""),
    ("--no-lower-case", False, "--no-lower-case is deprecated, use --cased"),
    ("--lower-case", True, "--lower-case is deprecated, use --do_lower_case")])
def test_the_case_of_the_vocabulary_can_be_set(reference, tmp_path, capsys, flag, lower,
                                               warning):
    """The directory name says uncased; the flag wins. The old flag names still work, with
    one warning line."""
    _, variables = reference
    google = write_google_dir(tmp_path / "uncased_L-2_H-32_A-4", variables)
    assert cli.convert_main(["--from_tf1", str(google), "--output", str(tmp_path / "out"),
                             flag]) == 0
    tokenizer = load_tokenizer(pretrained.load(tmp_path / "out").tokenizer_dir)
    assert tokenizer.do_lower_case is lower
    err = capsys.readouterr().err
    assert err == (f"bert-jax convert: warning: {warning}\n" if warning else "")
