"""tf.train.Example parsing without TensorFlow, checked against tf.io.parse_example."""
import glob

import numpy as np
import pytest

from bert_jax.data import corpus, example_proto, tfrecord
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.tokenization import DEFAULT_VOCAB


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Statically masked whole-word records (word_start written) and unmasked ones (no masks)."""
    shard = sorted(glob.glob(corpus.DEFAULT_CORPUS))[3]
    out = {}
    for name, options in (("static", DataOptions(dupe_factor=1, whole_word_masking=True)),
                          ("plain", DataOptions(dupe_factor=1, dynamic_masking=True))):
        files = cpd.shard_paths(str(tmp_path_factory.mktemp(name)), 1)
        cpd.create_pretraining_data([shard], files, DEFAULT_VOCAB, options, progress=False)
        out[name] = list(tfrecord.read_records(files[0]))[:300]
    return out


@pytest.mark.parametrize("kind", ["static", "plain"])
def test_parsed_as_tensorflow_parses_them(records, kind):
    """The same values and defaults (absent masks, word and unit starts) as tf.io.parse_example."""
    tf = pytest.importorskip("tensorflow")
    from bert_jax.data.tfdata_reader import tf_feature_spec
    features = example_proto.pretraining_features(128, 20)
    ours = example_proto.parse_examples(records[kind], features)
    theirs = tf.io.parse_example(records[kind], tf_feature_spec(features))
    assert set(ours) == set(theirs) == set(features)
    for name, value in theirs.items():
        np.testing.assert_array_equal(ours[name], value.numpy(), err_msg=name)
        assert ours[name].dtype == (np.float32 if features[name].is_float else np.int32)
    if kind == "plain":
        assert (ours["masked_lm_weights"] == 0).all() and (ours["unit_start"] == -1).all()


def test_a_record_that_is_not_what_is_asked_is_named(records):
    features = example_proto.pretraining_features(128, 20)
    with pytest.raises(example_proto.RecordError, match="record 1 is not a tf.train.Example"):
        example_proto.parse_examples([records["static"][0], b"\xff\xff\xff"], features)
    with pytest.raises(example_proto.RecordError,
                       match="record 0 holds 128 values of 'input_ids', not 64"):
        example_proto.parse_examples(records["static"][:1],
                                     example_proto.pretraining_features(64, 20))
    empty = example_proto.Example().SerializeToString()
    with pytest.raises(example_proto.RecordError, match="record 0 has no 'input_ids'"):
        example_proto.parse_examples([empty], features)


def test_the_walk_together_reads_every_varint_width_as_protobuf_does(monkeypatch):
    """Values of 1 to 10 bytes (ids past 2**28, negatives), rows of one-byte values and floats,
    read by the walk over all records at once (protobuf is not called) as protobuf reads them."""
    rng = np.random.default_rng(0)
    n, length = 50, 33
    widths = rng.integers(0, 63, (n, length))
    rows = {"input_ids": rng.integers(0, 2, (n, length)) << widths,
            "input_mask": rng.integers(0, 2, (n, length)),
            "segment_ids": -rng.integers(1, 2**40, (n, length)),
            "masked_lm_weights": rng.random((n, 3)).astype(np.float32)}
    serialized = example_proto.serialize_examples(rows)
    features = {"input_ids": example_proto.FixedFeature(length),
                "input_mask": example_proto.FixedFeature(length),
                "segment_ids": example_proto.FixedFeature(length),
                "masked_lm_weights": example_proto.FixedFeature(3, is_float=True),
                "absent": example_proto.FixedFeature(2, default=-1)}
    expected = example_proto._parse_with_protobuf(serialized, features)
    monkeypatch.setattr(example_proto, "_parse_with_protobuf", None)  # the walk alone
    parsed = example_proto.parse_examples(serialized, features)
    for name in features:
        np.testing.assert_array_equal(parsed[name], expected[name], err_msg=name)
    assert (parsed["absent"] == -1).all()
    np.testing.assert_array_equal(parsed["input_mask"], rows["input_mask"])
