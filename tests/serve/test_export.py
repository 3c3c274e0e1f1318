"""`bert-jax export`: the jax.export artifact and the TF SavedModel reload in a fresh
process and reproduce the model's outputs, on token ids and on raw strings."""

import json
import os
import re
import subprocess
import sys
import textwrap

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.models import heads
from bert_jax.models.encoder import BertModel
from bert_jax.serve import export
from bert_jax.tokenization import WordPieceTokenizer, text_io
from bert_jax.weights import pretrained

from helpers.export import CONFIG, LABELS, VOCAB, random_params, reload_saved_model_texts

TEXTS = ["the film was very good !", "a bad day"]
PAIRS = ["the cat sat on the mat .", "dogs ran"]


def encode(texts, pairs):
    """[CLS] a [SEP] b [SEP] rows padded with [PAD], written out independently of export."""
    tokenizer = WordPieceTokenizer(VOCAB)
    rows = []
    for a, b in zip(texts, pairs):
        a_ids, b_ids = tokenizer.encode(a).ids, tokenizer.encode(b).ids
        rows.append(([2, *a_ids, 3, *b_ids, 3], [0] * (len(a_ids) + 2) + [1] * (len(b_ids) + 1)))
    length = max(len(ids) for ids, _ in rows)
    pad = lambda x: x + [0] * (length - len(x))
    return (np.array([pad(ids) for ids, _ in rows], np.int32),
            np.array([pad([1] * len(ids)) for ids, _ in rows], np.int32),
            np.array([pad(segments) for _, segments in rows], np.int32))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A fine-tuning workdir (WORKDIR/best, as `bert-jax finetune` writes it), exported
    for the CPU, and the outputs the model itself gives on TEXTS/PAIRS."""
    root = tmp_path_factory.mktemp("export")
    module = heads.BertForSequenceClassification(CONFIG, len(LABELS))
    params = random_params(module)
    task = {"name": "test", "family": "classification", "label_names": LABELS,
            "num_labels": len(LABELS), "max_seq_length": 24}
    pretrained.save(root / "workdir" / "best", CONFIG, params,
                    tokenizer=WordPieceTokenizer(VOCAB), task=task)
    assert cli.main(["export", "--model", str(root / "workdir"), "--output",
                     str(root / "serving"), "--platforms", "cpu"]) == 0
    inputs = encode(TEXTS, PAIRS)
    logits = np.asarray(jax.jit(module.apply)({"params": params}, *inputs))
    return root / "serving", inputs, logits


RELOAD = textwrap.dedent("""
    import sys, numpy as np
    directory, inputs_file, out_file = sys.argv[1:]
    inputs = dict(np.load(inputs_file))
    arrays = [inputs[k] for k in ("input_ids", "input_mask", "segment_ids")]
    results = {}

    from jax import export as jax_export  # the artifact needs nothing but jax
    with open(f"{directory}/model.jaxexport", "rb") as f:
        exported = jax_export.deserialize(bytearray(f.read()))
    for key, value in exported.call(*arrays).items():
        results[f"jax_{key}"] = np.asarray(value)

    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer ops the SavedModel uses
    model = tf.saved_model.load(f"{directory}/saved_model")
    by_ids = model.signatures["serving_default"](
        **{k: tf.constant(v) for k, v in inputs.items() if k != "texts" and k != "pairs"})
    by_text = model.signatures["serve_text_pair"](text=tf.constant(inputs["texts"]),
                                                  text_pair=tf.constant(inputs["pairs"]))
    for prefix, out in (("tf_ids", by_ids), ("tf_text", by_text)):
        for key, value in out.items():
            value = value.numpy()
            results[f"{prefix}_{key}"] = value.astype(bytes) if value.dtype == object else value
    np.savez(out_file, **results)
""")


@pytest.mark.slow
@pytest.mark.tf
def test_exports_reload_in_a_fresh_process(exported, tmp_path):
    directory, (ids, mask, segments), logits = exported
    spec = json.loads((directory / "serving.json").read_text())
    assert spec["kind"] == "classification" and spec["labels"] == LABELS
    np.savez(tmp_path / "inputs.npz", input_ids=ids, input_mask=mask, segment_ids=segments,
             texts=np.array(TEXTS), pairs=np.array(PAIRS))
    script = tmp_path / "reload.py"
    script.write_text(RELOAD)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    subprocess.run([sys.executable, str(script), str(directory), str(tmp_path / "inputs.npz"),
                    str(tmp_path / "out.npz")], check=True, env=env, timeout=300)
    out = dict(np.load(tmp_path / "out.npz"))

    for prefix in ("jax", "tf_ids", "tf_text"):
        np.testing.assert_allclose(out[f"{prefix}_logits"], logits, atol=1e-5)
        np.testing.assert_array_equal(out[f"{prefix}_label_ids"], logits.argmax(-1))
    # The in-graph tokenizer builds the same rows as the Python one.
    np.testing.assert_array_equal(out["tf_text_input_ids"], ids)
    np.testing.assert_array_equal(out["tf_text_input_mask"], mask)
    expected_labels = [LABELS[i].encode() for i in logits.argmax(-1)]
    assert list(out["tf_text_labels"]) == list(out["tf_ids_labels"]) == expected_labels


@pytest.mark.tf
def test_served_model_helper_encodes_texts(exported):
    directory, inputs, logits = exported
    served = export.ServedModel(str(directory))
    for got, want in zip(served.encode(TEXTS, PAIRS), inputs):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(served.predict_texts(TEXTS, PAIRS)["logits"], logits, atol=1e-5)


def test_encoder_export_any_length_within_positions(tmp_path):
    params = random_params(BertModel(CONFIG))
    pretrained.save(tmp_path / "encoder", CONFIG, {"bert": params},
                    tokenizer=WordPieceTokenizer(VOCAB))
    spec = export.export(str(tmp_path / "encoder"), str(tmp_path / "out"), formats=("jax",),
                         platforms=("cpu",))
    assert spec["kind"] == "encoder"
    served = export.ServedModel(str(tmp_path / "out"))
    apply = jax.jit(BertModel(CONFIG).apply)
    for length in (5, CONFIG.max_position_embeddings):
        ids = np.random.default_rng(length).integers(5, 32, size=(2, length)).astype(np.int32)
        mask = np.ones_like(ids)
        mask[1, 3:] = 0
        out = served(ids, mask)
        want = apply({"params": params}, ids, mask, np.zeros_like(ids))
        np.testing.assert_allclose(out["sequence_output"], want.sequence_output, atol=1e-5)
        np.testing.assert_allclose(out["pooled_output"], want.pooled_output, atol=1e-5)
        mean = (want.sequence_output[1, :3]).mean(0)
        np.testing.assert_allclose(out["mean_embedding"][1], mean, atol=1e-5)
    with pytest.raises(ValueError, match="length 41 exceeds the model's 40 positions"):
        served(np.zeros((1, 41), np.int32))


@pytest.mark.tf
def test_saved_model_stablehlo_no_newer_than_tensorflows(exported):
    """TensorFlow releases lag jax's: the SavedModel's StableHLO is written for the
    installed TensorFlow's version when jax's default is newer (tensorflow 2.21 cannot
    read jax 0.11.2's default; it reads the model written for its own 1.13.7)."""
    from tensorflow.compiler.mlir.stablehlo import stablehlo as tf_stablehlo

    from bert_jax.models.jax_compat import export_stablehlo
    hlo = export_stablehlo()
    jax_default = hlo.get_version_from_compatibility_requirement(
        hlo.StablehloCompatibilityRequirement.WEEK_4)
    want = tf_stablehlo.get_smaller_version(jax_default, tf_stablehlo.get_current_version())
    saved = (exported[0] / "saved_model" / "saved_model.pb").read_bytes()
    assert set(re.findall(rb"StableHLO_v[0-9.]+", saved)) == {f"StableHLO_v{want}".encode()}


@pytest.mark.tf
def test_saved_model_tensorflow_cannot_run_is_refused(tmp_path, monkeypatch, capsys):
    """A jax much newer than tensorflow writes a model that tensorflow cannot run (seen
    with jax 0.12 and tensorflow 2.21 before `erf_without_composites`, TensorFlow's
    error below): the export runs the model in TensorFlow first and fails with the
    versions, writing nothing."""
    import tensorflow as tf
    from jax.experimental import jax2tf

    def newer_stablehlo(*args, **kwargs):
        def call(*inputs):
            raise tf.errors.InvalidArgumentError(None, None, (
                "Graph execution error:\n\nModule shape refinement failed: UNKNOWN: "
                "model.py:233:12: error: operand at index 0 has type 'tensor<1x2x64xf32>', "
                "but decomposition has type 'tensor<?x?x64xf32>'\n\t [[XlaCallModule]]"))
        return call

    monkeypatch.setattr(jax2tf, "convert", newer_stablehlo)
    pretrained.save(tmp_path / "encoder", CONFIG, {"bert": random_params(BertModel(CONFIG))},
                    tokenizer=WordPieceTokenizer(VOCAB))
    assert cli.main(["export", "--model", str(tmp_path / "encoder"), "--output",
                     str(tmp_path / "out"), "--platforms", "cpu"]) == 2
    error = capsys.readouterr().err
    assert f"tensorflow {tf.__version__} cannot run the model as jax {jax.__version__}" \
        in error and "--format jax" in error
    assert "(Module shape refinement failed: UNKNOWN: model.py:233:12: error: operand" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["mean_pooling", "tagging", "span"])
def test_other_heads_export(tmp_path, kind):
    config = CONFIG.replace(num_hidden_layers=1)
    module = {"mean_pooling": heads.BertForSequenceClassification(config, 4, pooling="mean"),
              "tagging": heads.BertForTokenClassification(config, 4),
              "span": heads.BertForQuestionAnswering(config)}[kind]
    params = random_params(module, seed=2)
    task = {"mean_pooling": {"family": "classification", "label_names": list("ABCD"),
                             "config": {"pooling": "mean"}},
            "tagging": {"name": "pos", "family": "tagging", "label_names": list("ABCD")},
            "span": {"name": "squad", "family": "squad"}}[kind]
    pretrained.save(tmp_path / "model", config, params, tokenizer=WordPieceTokenizer(VOCAB),
                    task=task)
    export.export(str(tmp_path / "model"), str(tmp_path / "out"), formats=("jax",),
                  platforms=("cpu",))
    inputs = encode(TEXTS, PAIRS)
    out = export.ServedModel(str(tmp_path / "out"))(*inputs)
    want = jax.jit(module.apply)({"params": params}, *inputs)
    if kind != "span":
        np.testing.assert_allclose(out["logits"], want, atol=1e-5)
        np.testing.assert_array_equal(out["label_ids"], np.argmax(want, -1))
    else:
        np.testing.assert_allclose(out["start_logits"], want[0], atol=1e-5)
        np.testing.assert_allclose(out["end_logits"], want[1], atol=1e-5)


@pytest.mark.tf
def test_head_tail_truncation_in_graph_equals_python():
    import tensorflow as tf

    from bert_jax.tokenization.text_io import truncate_pair
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 30, size=(64, 2))
    a = [list(range(n)) for n in lengths[:, 0]]
    b = [list(range(100, 100 + n)) for n in lengths[:, 1]]
    budget = 17
    pieces = [tf.ragged.constant(a, tf.int64), tf.ragged.constant(b, tf.int64)]
    lengths = export.truncated_lengths_tf([p.row_lengths() for p in pieces], budget)
    got = [export.keep_head_tail_tf(p, n, 0.25).to_list() for p, n in zip(pieces, lengths)]
    want = [truncate_pair(x, y, budget, 0.25) for x, y in zip(a, b)]
    assert got == [[w[0] for w in want], [w[1] for w in want]]
    single = export.keep_head_tail_tf(pieces[0], tf.minimum(pieces[0].row_lengths(), budget),
                                      0.25).to_list()
    assert single == [truncate_pair(x, None, budget, 0.25)[0] for x in a]


@pytest.mark.slow
@pytest.mark.tf
def test_saved_model_truncates_like_fine_tuning(tmp_path):
    """A model fine-tuned with `truncation=head+tail` is served with the same rows."""
    config = CONFIG.replace(num_hidden_layers=1)
    module = heads.BertForSequenceClassification(config, 2)
    pretrained.save(tmp_path / "model", config, random_params(module),
                    tokenizer=WordPieceTokenizer(VOCAB),
                    task={"family": "classification", "label_names": ["x", "y"],
                          "max_seq_length": 8, "config": {"truncation": "head+tail"}})
    export.export(str(tmp_path / "model"), str(tmp_path / "out"), platforms=("cpu",))
    texts = ["the big red cat sat on the old mat and saw a new hat", "a good film"]
    served = export.ServedModel(str(tmp_path / "out"))
    ids, _, _ = served.encode(texts)
    words = {w: i for i, w in enumerate(VOCAB)}
    # 6 tokens of room: int(6 / 4) = 1 from the start, 5 from the end.
    assert ids[0].tolist() == [2, *(words[w] for w in "the and saw a new hat".split()), 3]
    np.testing.assert_array_equal(
        reload_saved_model_texts(tmp_path / "out", texts, tmp_path)["input_ids"], ids)


@pytest.mark.slow
@pytest.mark.tf
def test_sentencepiece_tokenizer_in_saved_model(tmp_path):
    from bert_jax.data.build_vocab import train_sentencepiece
    from bert_jax.data.corpus import CORPUS_DIR
    tokenizer = train_sentencepiece([os.path.join(CORPUS_DIR, "kjv-00000-of-00003.txt.gz")],
                                    300, "unigram", str(tmp_path / "spm"))
    config = CONFIG.replace(vocab_size=tokenizer.vocab_size, num_hidden_layers=1)
    module = heads.BertForSequenceClassification(config, 2)
    params = random_params(module)
    pretrained.save(tmp_path / "model", config, params, tokenizer=tokenizer,
                    task={"family": "classification", "label_names": ["x", "y"]})
    export.export(str(tmp_path / "model"), str(tmp_path / "out"), platforms=("cpu",))
    texts = ["In the beginning God created the heaven and the earth.", "Jesus wept."]
    out = reload_saved_model_texts(tmp_path / "out", texts, tmp_path)
    served = export.ServedModel(str(tmp_path / "out"))
    ids, mask, _ = served.encode(texts)
    np.testing.assert_array_equal(out["input_ids"], ids)
    np.testing.assert_allclose(out["logits"], served(ids, mask)["logits"], atol=1e-5)


@pytest.mark.slow
@pytest.mark.tf
def test_minilm_serving_keeps_its_similarity(tmp_path, minilm_dir):
    source = minilm_dir
    assert cli.main(["convert", "--from_hf", source, "--output", str(tmp_path / "minilm")]) == 0
    export.export(str(tmp_path / "minilm"), str(tmp_path / "out"), platforms=("cpu",),
                  max_seq_length=128)
    texts = ["A man is eating food.", "A man is eating a piece of bread."]
    cosine = lambda e: e[0] @ e[1] / np.linalg.norm(e[0]) / np.linalg.norm(e[1])
    by_jax = export.ServedModel(str(tmp_path / "out")).predict_texts(texts)["mean_embedding"]
    by_tf = reload_saved_model_texts(tmp_path / "out", texts, tmp_path)["mean_embedding"]
    assert abs(cosine(by_jax) - 0.755) < 1e-3 and abs(cosine(by_tf) - 0.755) < 1e-3


TAG_TEXTS = ["江泽民在北京会见了代表团", "Apple 公司在 California.", "",
             "the cat, the dog! a big\x00red hat", "e\u0301 \u0301 ok — the old man's hat (new)."]


@pytest.mark.slow
@pytest.mark.tf
def test_saved_model_tags_words_like_tag_texts(tmp_path):
    """serve_text of a tagging model: words split in-graph as text_io.split_words does,
    one tag per word, character offsets; word_tag_records gives tag_texts' records.
    (Reloaded in this process: the other tests show a fresh one needs only TF.)"""
    chars = sorted({c for t in TAG_TEXTS for c in t if ord(c) > 0x2000})
    config = CONFIG.replace(vocab_size=len(VOCAB) + len(chars), num_hidden_layers=1,
                            max_position_embeddings=16)
    module = heads.BertForTokenClassification(config, 5)
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    params = nn.unbox(module.init(jax.random.key(3), np.zeros((1, 4), np.int32)))["params"]
    params["classifier"]["kernel"] *= 30  # tags that vary from token to token
    pretrained.save(tmp_path / "model", config, params,
                    tokenizer=WordPieceTokenizer(VOCAB + chars),
                    task={"family": "tagging", "label_names": labels, "max_seq_length": 12})
    export.export(str(tmp_path / "model"), str(tmp_path / "out"), platforms=("cpu",))
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)
    signature = tf.saved_model.load(str(tmp_path / "out" / "saved_model")).signatures
    out = {k: v.numpy() for k, v in signature["serve_text"](text=tf.constant(TAG_TEXTS)).items()}
    want = export.ServedModel(str(tmp_path / "out")).tag_texts(TAG_TEXTS)
    assert text_io.word_tag_records(TAG_TEXTS, out) == want
    for i, record in enumerate(want):
        n = out["num_words"][i]
        assert [w.decode() for w in out["words"][i][:n]] == record["words"]
        assert list(out["word_tag_ids"][i][:n]) == [labels.index(t) for t in record["tags"]]
    assert len(want[0]["words"]) == 12  # two past the 10 tokens of room get the first label
    assert {t for r in want for t in r["tags"]} > {"O"}
