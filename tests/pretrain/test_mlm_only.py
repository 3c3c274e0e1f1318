"""MLM-only pretraining (`next_sentence_prediction=False`): full-sentence rows, records
that say whether they carry NSP, a run without the NSP head, resume and fine-tuning."""

import contextlib
import glob
import io
import json
import os

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.data import cli as data_cli
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data import instances
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import make_pretrain_iterator
from bert_jax.finetune import job, model_source
from bert_jax.host.folders import DATA_FOLDER
from bert_jax.models import heads
from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.train.model_config import run_bert_config
from bert_jax.weights import pretrained

from helpers import REPO
from helpers.finetune import micro_config
from helpers.pretrain import small_config
from helpers.records import read_records

SEP = 3


def sentences(*lengths, start=100):
    """Sentences of the given lengths with consecutive ids from `start`."""
    out, next_id = [], start
    for n in lengths:
        out.append(np.arange(next_id, next_id + n, dtype=np.int32))
        next_id += n
    return out


def test_full_sentence_rows_are_contiguous_and_filled():
    documents = [sentences(3, 4, start=100), sentences(2, 5, start=200),
                 sentences(1, 20, 3, start=300)]
    rows = instances.full_sentence_rows(documents, max_seq_length=12, sep_id=SEP)
    # 10 tokens a row: a sentence that does not fit starts the next row; documents are
    # joined by a [SEP] (none at a row's start or end); the 20-token sentence is cut
    # into row-sized pieces.
    assert rows == [[*range(100, 107), SEP, 200, 201], [*range(202, 207), SEP, 300],
                    list(range(301, 311)), list(range(311, 321)), [321, 322, 323]]
    stream = [t for row in rows for t in row if t != SEP]
    assert stream == [int(t) for d in documents for s in d for t in s]  # nothing lost

    packed = instances.pack_full_sentence_rows(rows, 12, cls_id=2, sep_id=SEP)
    assert set(packed) == {"input_ids", "input_mask", "segment_ids"}
    assert packed["input_ids"][1].tolist() == [2, *range(202, 207), SEP, 300, SEP, 0, 0, 0]
    assert packed["input_mask"].sum(1).tolist() == [len(r) + 2 for r in rows]
    assert not packed["segment_ids"].any()


def test_create_data_without_nsp(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("".join(
        f"Document {d} sentence {s} has a few words in it.\n" + ("\n" if s == 5 else "")
        for d in range(4) for s in range(6)))
    out = tmp_path / "out"
    assert data_cli.create_data_main(["--input", str(text), "--output", str(out), "--num_shards",
                                      "1", "--dupe_factor", "2", "--max_seq_length", "64",
                                      "--no_next_sentence_prediction", "--num_workers", "1",
                                      "--no_progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads((out / DATA_FOLDER.record).read_text())["next_sentence_prediction"] is False
    assert summary["random_next"] == 0 and summary["masked_tokens"] > 0
    rows = read_records(cpd.shard_paths(str(out), 1), 64)
    tok = load_tokenizer(DEFAULT_VOCAB)
    lengths = rows["input_mask"].sum(1)
    assert len(lengths) == summary["instances"]
    assert (rows["next_sentence_labels"] == -1).all()  # the feature is absent
    assert not rows["segment_ids"].any()
    assert (rows["input_ids"][:, 0] == tok.cls_id).all()
    assert (rows["input_ids"][np.arange(len(lengths)), lengths - 1] == tok.sep_id).all()
    # 24 sentences of ~13 tokens, 62 a row: four a row (a fifth does not fit), crossing
    # documents, in both copies
    assert len(lengths) == 2 * 6 and lengths.min() >= 4 * 12 + 2


@pytest.fixture(scope="module")
def record_sets(tmp_path_factory):
    """{'nsp': pattern, 'mlm': pattern}: the same small text as NSP pairs and MLM-only rows."""
    shard = sorted(glob.glob(cpd.corpus.DEFAULT_CORPUS))[3]
    out = {}
    for name, nsp in (("nsp", True), ("mlm", False)):
        directory = tmp_path_factory.mktemp(name)
        options = DataOptions(max_seq_length=64, max_predictions_per_seq=8, dupe_factor=1,
                              dynamic_masking=True, next_sentence_prediction=nsp)
        cpd.create_pretraining_data([shard], cpd.shard_paths(str(directory), 1),
                                    DEFAULT_VOCAB, options, progress=False)
        out[name] = str(directory / "*.tfrecord")
    return out


def batches(pattern, nsp, pack=False):
    options = DataOptions(per_host_batch_size=8, max_seq_length=64,
                              max_predictions_per_seq=8, dynamic_masking=True, packing=pack,
                              shuffle_buffer=100, next_sentence_prediction=nsp)
    return make_pretrain_iterator([pattern], options, process_index=0, process_count=1,
                                  tokenizer=load_tokenizer(DEFAULT_VOCAB))


def test_pipeline_reads_mlm_only_records_and_refuses_a_mismatch(record_sets):
    for pack in (False, True):
        batch = next(batches(record_sets["mlm"], nsp=False, pack=pack))
        assert not [k for k in batch if k.startswith("next_sentence")]
        assert batch["masked_lm_weights"].sum() > 0
    assert "next_sentence_labels" in next(batches(record_sets["nsp"], nsp=True))
    with pytest.raises(ValueError, match="hold next-sentence pairs with NSP labels"):
        next(batches(record_sets["nsp"], nsp=False))
    with pytest.raises(ValueError, match="are MLM-only .* set next_sentence_prediction=False"):
        next(batches(record_sets["mlm"], nsp=True))


def test_model_without_nsp_has_no_nsp_params():
    import jax
    run = small_config("unused")
    config = run_bert_config(run, run.model, 100)
    ids = np.zeros((1, 8), np.int32)
    params = heads.BertForPreTraining(config, next_sentence_prediction=False).init(
        jax.random.key(0), ids)["params"]
    assert set(params) == {"bert", "mlm"} and "pooler" in params["bert"]
    out = heads.BertForPreTraining(config, False).apply({"params": params}, ids)
    assert out.nsp_logits is None and out.mlm_logits.shape == (1, 8, 100)


OVERRIDES = dict(next_sentence_prediction=False, num_train_steps=2, checkpoint_every_steps=2,
                 eval_every_steps=2, log_every_steps=1)


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory, text_corpus):
    """(workdir, result, stderr, params of init_from) of a 2-step MLM-only run that starts
    from an NSP model's weights."""
    import flax.linen as nn
    import jax
    tmp = tmp_path_factory.mktemp("mlm_run")
    run = small_config(text_corpus)
    bert_config = run_bert_config(run, run.model, 8192)
    nsp_params = jax.device_get(nn.unbox(heads.BertForPreTraining(bert_config).init(
        jax.random.key(1), np.zeros((1, 8), np.int32))["params"]))
    pretrained.save(tmp / "nsp_model", bert_config, nsp_params,
                    tokenizer=load_tokenizer(DEFAULT_VOCAB))
    workdir = str(tmp / "mlm")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        result = train_and_evaluate(small_config(
            text_corpus, init_from=repr(str(tmp / "nsp_model")), **OVERRIDES), workdir)
    return workdir, result, stderr.getvalue(), nsp_params


@pytest.mark.long
def test_mlm_only_run_has_no_nsp_head_or_metrics(mlm_run):
    workdir, result, stderr, nsp_params = mlm_run
    assert "the NSP head of" in stderr  # init_from's NSP head dropped, the rest used
    assert not [k for k in result["train"] if "nsp" in k] and "mlm_accuracy" in result["train"]
    assert set(result["eval"]) == {"loss", "mlm_loss", "mlm_accuracy"}
    assert result["eval"]["loss"] == result["eval"]["mlm_loss"]
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        assert "nsp" not in f.read()
    with open(os.path.join(workdir, "data", DATA_FOLDER.record)) as f:
        assert json.load(f)["next_sentence_prediction"] is False
    params = pretrained.load(workdir).params
    assert set(params) == {"bert", "mlm"} and "pooler" in params["bert"]
    # The pooler, unused without NSP, keeps init_from's values (shrunk by weight decay).
    np.testing.assert_allclose(params["bert"]["pooler"]["kernel"],
                               nsp_params["bert"]["pooler"]["kernel"], rtol=1e-4)
    # What fine-tuning takes from it: the whole encoder.
    source = model_source.resolve_model(micro_config("spam", f"init_from={workdir}", "model="))
    jax_tree_equal(source.encoder_params, params["bert"])


def jax_tree_equal(a, b):
    import jax
    assert jax.tree.structure(a) == jax.tree.structure(b)
    jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.mark.long
def test_resume_with_nsp_switched_on_is_refused(mlm_run, text_corpus, capsys):
    workdir = mlm_run[0]
    args = ["pretrain", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
            "--workdir", workdir] + [f"--config.{k}={v}" for k, v in dict(
                small_config(text_corpus, **OVERRIDES)).items()
                if k in ("input_files", "max_seq_length", "max_predictions_per_seq",
                         "global_batch_size", "checkpoint_every_steps", "warmup_steps",
                         "eval_fraction")]
    assert cli.main(args + ["--config.num_train_steps=4",
                            "--config.next_sentence_prediction=True"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "next_sentence_prediction False -> True" in err and "cannot change on resume" in err
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2"]


@pytest.mark.long
def test_convert_to_hf_gives_a_masked_lm(mlm_run, tmp_path):
    # No NSP head: transformers' BertForMaskedLM (which has no pooler).
    assert cli.main(["convert", "--model", mlm_run[0], "--to_hf", str(tmp_path / "hf")]) == 0
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["BertForMaskedLM"]


@pytest.mark.long
@pytest.mark.slow
def test_finetuning_starts_from_an_mlm_only_checkpoint(mlm_run, tmp_path):
    config = micro_config("spam", f"init_from={mlm_run[0]}", "model=", "max_train_examples=16",
                          "max_eval_examples=16", "num_train_epochs=1")
    results = job.finetune(config, str(tmp_path / "finetune"))
    assert 0 <= results["validation"]["accuracy"] <= 1
