"""Custom CSV/TSV/JSONL tasks end to end (seeds, packing, predict, evaluate), packing
correctness, and the error messages of the fine-tuning entry points."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.finetune import cli, inference, job, keeping, model_source, packing, selection, tasks
from bert_jax.finetune.tasks import csv_task
from bert_jax.models import heads
from bert_jax.models.config import ConfigError
from bert_jax.models.presets import preset
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.weights import pretrained

from helpers import REPO
from helpers.finetune import NEGATIVE, POSITIVE, micro_config, shared_compilation_cache, write_tsv


@pytest.fixture
def sentiment_files(tmp_path):
    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    return write_tsv(tmp_path / "train.tsv", rows * 3), write_tsv(tmp_path / "dev.tsv", rows)


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
    return str(tmp_path_factory.getbasetemp() / "finetune_jax_cache")


@pytest.mark.long
def test_csv_with_seeds_then_evaluate_and_predict(tmp_path, sentiment_files, compile_cache,
                                                  capsys):
    train, dev = sentiment_files
    config = micro_config("csv", f"train_file={train}", f"validation_file={dev}",
                          f"test_file={dev}", "text_column=sentence", "label_column=sentiment",
                          "seeds=1,2", "num_train_epochs=2")
    workdir = str(tmp_path / "run")
    with shared_compilation_cache(compile_cache):
        summary = selection.run_finetune(config, workdir)
        assert set(summary["validation"]["accuracy"]) == {"mean", "std"}
        assert summary["seeds"] == [1, 2] and summary["best_seed"] in (1, 2)
        with open(os.path.join(workdir, "eval_results.json")) as f:
            assert json.load(f)["validation"] == summary["validation"]
        for seed, run in summary["runs"].items():  # the first epoch of the best score is kept
            scores = validation_by_epoch(os.path.join(workdir, f"seed_{seed}"))
            assert run["kept_epoch"] == 1 + scores.index(max(scores))
            assert run["validation"]["accuracy"] == max(scores)
        assert cli.evaluate_main(["--model", workdir]) == 0
        inputs = tmp_path / "in.jsonl"
        inputs.write_text(json.dumps({"sentence": "a great story"}) + "\n")
        out = tmp_path / "out.jsonl"
        assert cli.predict_main(["--model", workdir, "--input", str(inputs), "--output",
                                 str(out)]) == 0
        model = inference.load_finetuned(workdir)
        [in_memory] = model.predict(["a great story"])
        with pytest.raises(ValueError, match="takes single texts; input 0 is a pair"):
            model.predict([("a great story", "and a great cast")])
    record = json.loads(out.read_text())
    assert record["label"] in ("neg", "pos")
    assert set(record["probabilities"]) == {"neg", "pos"}
    assert sum(record["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    assert in_memory["label"] == record["label"]
    assert in_memory["probabilities"] == pytest.approx(record["probabilities"], abs=1e-6)


def validation_by_epoch(workdir, metric="accuracy"):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return [line[f"validation/{metric}"] for line in lines if f"validation/{metric}" in line]


@pytest.mark.long
def test_jsonl_pair_regression_with_packing(tmp_path, compile_cache):
    rows = [{"a": a, "b": b, "score": float(len(set(a.split()) & set(b.split()))) + 0.5}
            for a in POSITIVE for b in NEGATIVE]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = micro_config("csv", f"train_file={path}", f"validation_file={path}",
                          "text_column=a", "text_pair_column=b", "label_column=score",
                          "packing=true", "length_bucketing=true", "compute_dtype=bfloat16",
                          "remat_policy=full", "num_train_epochs=2", "keep_checkpoint=last",
                          "pooling=mean")
    with shared_compilation_cache(compile_cache):
        results = job.finetune(config, str(tmp_path / "run"))
    assert results["kept_epoch"] == 2
    assert results["validation"]["pearson"] == validation_by_epoch(tmp_path / "run", "pearson")[1]
    assert {"pearson", "spearman", "mse"} <= set(results["validation"])
    assert all(np.isfinite(v) for v in results["validation"].values())
    assert results["selection_metric"] == "pearson"
    best = pretrained.load(str(tmp_path / "run" / "best"))
    assert (best.config.dtype, best.config.remat_policy) == ("bfloat16", "full")
    assert {p.dtype for p in jax.tree.leaves(best.params)} == {np.dtype("float32")}
    assert "pooler" not in best.params["bert"]  # the mean-pooled head has none to train
    with shared_compilation_cache(compile_cache):
        [record] = inference.load_finetuned(str(tmp_path / "run")).predict([(rows[0]["a"],
                                                                          rows[0]["b"])])
    assert np.isfinite(record["score"])


def test_keep_checkpoint_rules():
    kept = keeping.Kept(score=0.9, epoch=1)
    assert not keeping.should_keep("best", kept, 0.9, last=True)  # a tie keeps the earlier epoch
    assert keeping.should_keep("best", kept, 0.91, last=False)
    assert keeping.should_keep("last", kept, 0.5, last=True)  # whatever the validation score
    assert not keeping.should_keep("last", kept, 0.99, last=False)


def test_label_inference():
    assert csv_task.infer_labels(["spam", "ham", "spam"]) == ["ham", "spam"]
    assert csv_task.infer_labels(["1", "0", "2"]) == ["0", "1", "2"]
    assert csv_task.infer_labels([0.5, 1.0, 3.25]) is None
    assert csv_task.infer_labels(["1", "2"], "regression") is None


@pytest.mark.parametrize("pooling", heads.CLASSIFIER_POOLINGS)
def test_packed_rows_give_the_same_logits_as_separate_rows(pooling):
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    config = preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=1)
    model = heads.BertForSequenceClassification(config, 3, pooling)
    texts = ["a short one", "another example that is a little longer", "third"]
    features = [{"input_ids": [tokenizer.cls_id, *tokenizer.encode(t).ids, tokenizer.sep_id],
                 "segment_ids": [0] * (len(tokenizer.encode(t).ids) + 2), "label": i,
                 "feature_index": i} for i, t in enumerate(texts)]
    padded = packing.collate(features, 32)
    packed = packing.collate_packed([features], 32, max_per_row=4)
    assert packed["example_weights"].tolist() == [[1, 1, 1, 0]]
    # Jitted: eager, each of the model's operations would be dispatched on its own.
    params = jax.jit(model.init)(jax.random.key(0), jnp.asarray(padded["input_ids"]))["params"]
    apply = jax.jit(model.apply)
    separate = apply({"params": params}, padded["input_ids"], padded["input_mask"],
                     padded["segment_ids"])
    together = apply({"params": params}, packed["input_ids"], packed["input_mask"],
                     packed["segment_ids"], position_ids=packed["position_ids"],
                     example_ids=packed["example_ids"], cls_positions=packed["cls_positions"])
    np.testing.assert_allclose(together[0, :3], separate, atol=1e-5)


def test_packing_plan_keeps_examples_per_batch():
    features = [{"input_ids": [1] * n, "segment_ids": [0] * n, "label": 0, "feature_index": i}
                for i, n in enumerate([10, 20, 30, 12, 8] * 20)]
    per_row, rows = packing.packed_plan(features, 64, 8, 32)
    assert per_row > 2 and rows * per_row >= 32
    batches = list(packing.packed_batches(features, rows, 64, 8, shuffle_seed=0))
    assert sum(b["example_weights"].sum() for b in batches) == len(features)
    assert all(b["input_ids"].shape == (rows, 64) for b in batches)


def test_truncation_keeps_the_head_or_head_and_tail():
    from bert_jax.tokenization.text_io import head_fraction, truncate_pair
    ten, four = list(range(10)), list(range(100, 104))
    assert truncate_pair(ten, None, 8) == ([0, 1, 2, 3, 4, 5, 6, 7], None)
    # head+tail: int(8 / 4) = 2 tokens from the start, 6 from the end.
    assert truncate_pair(ten, None, 8, head_fraction("head+tail")) == (
        [0, 1, 4, 5, 6, 7, 8, 9], None)
    # Pairs: longest-first picks the lengths (4 + 4), then each cut text keeps its ends.
    assert truncate_pair(ten, four, 8) == ([0, 1, 2, 3], four)
    assert truncate_pair(ten, four, 8, 0.25) == ([0, 7, 8, 9], four)
    assert truncate_pair(four, None, 8, 0.25) == (four, None)  # short texts are untouched
    with pytest.raises(ValueError, match="truncation must be one of head, head\\+tail; "
                                         "got 'tail'"):
        tasks.get_task(micro_config("csv", "truncation=tail"))


# --- errors ------------------------------------------------------------------------------

def test_unknown_task_lists_known_ones():
    with pytest.raises(UserError, match="unknown task 'sst3'; known tasks: .*cola.*squad_v2.*sst2"):
        tasks.get_task(micro_config("sst3"))


def test_missing_column_names_the_columns(tmp_path, sentiment_files):
    train, _ = sentiment_files
    task = tasks.get_task(micro_config("csv", f"train_file={train}"))
    with pytest.raises(ValueError, match=r"no text column 'text'.*'sentence', 'sentiment'"):
        task.load("train")


@pytest.mark.parametrize("override, message", [
    ("--config.lerning_rate=1",
     "error: unknown config key 'lerning_rate'; did you mean learning_rate?"),
    ("--config.train_file=/no/such.tsv", "error: no such file: /no/such.tsv"),
    ("--config.keep_checkpoint=first",
     "error: keep_checkpoint must be one of best, last; got 'first'"),
    ("--config.pooling=max", "error: pooling must be one of pooler, mean; got 'max'"),
])
def test_finetune_command_names_bad_input_in_one_line(override, message, capsys):
    from bert_jax import cli as bert_jax_cli
    config = os.path.join(REPO, "configs", "finetune.py") + ":csv,tiny"
    assert bert_jax_cli.main(["finetune", "--config", config, "--workdir", "unused",
                              override]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bert-jax finetune: {message}") and err.count("\n") == 1, err


@pytest.fixture(scope="module")
def micro_checkpoint(tmp_path_factory):
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    config = preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=1,
                        hidden_size=32, num_attention_heads=2, intermediate_size=64)
    model = heads.BertForSequenceClassification(config, 2)
    params = model.init(jax.random.key(0), jnp.ones((1, 4), jnp.int32))["params"]
    path = str(tmp_path_factory.mktemp("ckpt") / "micro")
    pretrained.save(path, config, jax.tree.map(np.asarray, params), tokenizer=tokenizer)
    return path


def test_checkpoint_with_other_hidden_size_fails_clearly(micro_checkpoint):
    config = micro_config("sst2", f"init_from={micro_checkpoint}", "model=tiny")
    with pytest.raises(ConfigError, match="has hidden_size=32 but the config asks for "
                                          "hidden_size=128"):
        model_source.resolve_model(config)


def test_checkpoint_with_other_vocabulary_fails_clearly(micro_checkpoint, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    config = micro_config("sst2", f"init_from={micro_checkpoint}", "model=", f"tokenizer={vocab}")
    with pytest.raises(ConfigError, match="tokenizer has 7 tokens but checkpoint"):
        model_source.resolve_model(config)
    wrong_vocab = micro_config("sst2", f"init_from={micro_checkpoint}",
                               "model={'preset': 'tiny', 'vocab_size': 100, 'hidden_size': 32}")
    with pytest.raises(ConfigError, match="vocab_size=8192 but the config asks for "
                                          "vocab_size=100"):
        model_source.resolve_model(wrong_vocab)


def test_bucketed_batches_pad_to_the_smallest_bucket_that_fits():
    """Short batches pad to 16 tokens (SST-2's sentences: 10 at the median), longer ones to
    the next power of two, the longest to max_seq_length; every feature comes once."""
    lengths = [5, 9, 12, 14, 20, 30, 100, 128]
    features = [{"input_ids": [1] * n, "segment_ids": [0] * n, "label": i}
                for i, n in enumerate(lengths)]
    batches = list(packing.padded_batches(features, 2, 128, bucketing=True, shuffle_seed=0))
    widths = sorted(b["input_ids"].shape[1] for b in batches)
    assert widths == [16, 16, 32, 128]
    assert sorted(int(x) for b in batches for x in b["label"]) == list(range(len(lengths)))
    assert all((b["input_mask"].sum(1) == [lengths[int(x)] for x in b["label"]]).all()
               for b in batches)
