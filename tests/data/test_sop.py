"""Sentence-order prediction (ALBERT's SOP): pairs of consecutive spans swapped half the
time, records that say so, a pipeline that refuses to mix them with NSP, and an ALBERT
pretraining run on them."""

import glob
import json
import random

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.data import cli as data_cli
from bert_jax.data import corpus, instances
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import make_pretrain_iterator
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer

from helpers.pretrain import small_config
from helpers.records import read_records


def document(lengths, start):
    """Sentences of consecutive ids, so a span's position in the document is readable."""
    out, next_id = [], start
    for n in lengths:
        out.append(np.arange(next_id, next_id + n))
        next_id += n
    return out


def test_pairs_are_consecutive_spans_swapped_half_the_time():
    rng = random.Random(0)
    documents = [document(rng.choices(range(1, 9), k=rng.randint(1, 12)), 1000 * d)
                 for d in range(300)]
    stats = instances.InstanceStats()
    made = []
    for index in range(len(documents)):
        made += instances.instances_from_document(documents, index, 40, 0.1, rng, stats,
                                                  sentence_order=True)
    assert stats.instances == len(made) > 300 and stats.random_next == 0
    for inst in made:
        first, second = (inst.tokens_b, inst.tokens_a) if inst.swapped else (
            inst.tokens_a, inst.tokens_b)
        assert first and second and len(first) + len(second) <= 37
        assert len({t // 1000 for t in first + second}) == 1  # one document
        assert np.all(np.diff(first) == 1) and np.all(np.diff(second) == 1)
        # B follows A; truncation may drop tokens at either end of each.
        assert second[0] > first[-1]
        if len(first) + len(second) < 37:
            assert second[0] == first[-1] + 1
    assert 0.45 < stats.swapped / stats.instances < 0.55
    rows = instances.pack_instances(made, 40, 101, 102)
    np.testing.assert_array_equal(rows["next_sentence_labels"], [i.swapped for i in made])


@pytest.fixture(scope="module")
def record_sets(tmp_path_factory):
    shard = sorted(glob.glob(corpus.DEFAULT_CORPUS))[3]
    out = {}
    for name, sop in (("nsp", False), ("sop", True)):
        directory = tmp_path_factory.mktemp(name)
        argv = ["--input", shard, "--output", str(directory), "--num_shards", "1",
                "--dupe_factor", "1", "--max_seq_length", "64", "--max_predictions_per_seq",
                "8", "--num_workers", "1", "--no_progress"]
        sop_flag = ["--sentence_order_prediction"] if sop else []
        assert data_cli.create_data_main(argv + sop_flag) == 0
        out[name] = str(directory)
    return out


def batches(directory, sop, nsp=True):
    options = DataOptions(per_host_batch_size=8, max_seq_length=64,
                              max_predictions_per_seq=8, shuffle_buffer=100,
                              next_sentence_prediction=nsp, sentence_order_prediction=sop)
    return make_pretrain_iterator([f"{directory}/*.tfrecord"], options, process_index=0,
                                  process_count=1, tokenizer=load_tokenizer(DEFAULT_VOCAB))


def test_create_data_writes_sentence_order_labels(record_sets):
    summary = json.loads(open(f"{record_sets['sop']}/summary.json").read())
    assert json.loads(open(f"{record_sets['sop']}/options.json").read())[
        "sentence_order_prediction"] is True
    assert summary["random_next"] == 0 and 0.4 < summary["swapped_fraction"] < 0.6
    rows = read_records(glob.glob(f"{record_sets['sop']}/*.tfrecord"), 64, 8)
    assert (rows["next_sentence_labels"] == -1).all()  # absent: these are not NSP labels
    assert set(rows["sentence_order_labels"][:, 0]) == {0, 1}


def test_pipeline_reads_sop_records_and_refuses_a_mismatch(record_sets):
    batch = next(batches(record_sets["sop"], sop=True))
    assert set(batch["next_sentence_labels"]) <= {0, 1}
    with pytest.raises(ValueError, match="hold sentence-order pairs .* set "
                                         "sentence_order_prediction=True"):
        next(batches(record_sets["sop"], sop=False))
    with pytest.raises(ValueError, match="no sentence-order labels"):
        next(batches(record_sets["nsp"], sop=True))
    with pytest.raises(ValueError, match="needs next_sentence_prediction=True"):
        batches(record_sets["sop"], sop=True, nsp=False)


def test_sop_without_pairs_is_refused(tmp_path, capsys):
    assert cli.main(["create-data", "--output", str(tmp_path), "--sentence_order_prediction",
                     "--no_next_sentence_prediction", "--no_progress"]) == 2
    assert "it needs next_sentence_prediction=True" in capsys.readouterr().err


@pytest.mark.slow
def test_albert_pretrains_with_sentence_order_prediction(tmp_path, text_corpus):  # noqa: F811
    from bert_jax.host.folders import DATA_FOLDER, PRETRAINING_WORKDIR
    from bert_jax.pretrain.job import train_and_evaluate
    from bert_jax.weights import pretrained
    model = ("{'preset': 'albert-base-v2', 'num_hidden_layers': 2, 'hidden_size': 32, "
             "'num_attention_heads': 2, 'intermediate_size': 64, 'embedding_size': 16, "
             "'max_position_embeddings': 64}")
    config = small_config(text_corpus, model=model, sentence_order_prediction=True,
                          num_train_steps=2, checkpoint_every_steps=2, eval_every_steps=2,
                          scan_layers=True)
    result = train_and_evaluate(config, str(tmp_path))
    assert np.isfinite(result["eval"]["nsp_loss"])
    params = pretrained.load_pretrained_from_workdir(str(tmp_path)).params
    assert "nsp" in params and sorted(params["bert"]["encoder"]) == ["group_0"]
    with open(tmp_path / PRETRAINING_WORKDIR.data / DATA_FOLDER.record) as f:
        assert json.load(f)["sentence_order_prediction"] is True
