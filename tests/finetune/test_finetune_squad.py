"""SQuAD: windows over long contexts, v2 no-answer, exact answer text through offsets,
official EM/F1, and a tiny end-to-end run on JSON fixtures."""

from __future__ import annotations

import os

import pytest
import tensorflow_datasets as tfds

from bert_jax.finetune import inference, job, tasks
from bert_jax.finetune.tasks import squad
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer

from helpers.finetune import micro_config, shared_compilation_cache
from helpers.squad import SHORT_CONTEXT, oracle_outputs, squad_json


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(DEFAULT_VOCAB)


def test_windows_cover_every_token_with_stride():
    assert squad.windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert squad.windows(3, 4, 2) == [(0, 3)]


@pytest.mark.parametrize("version_2", [False, True])
def test_oracle_logits_recover_exact_answers(tmp_path, tokenizer, version_2):
    path = squad_json(tmp_path / "dev.json", version_2)
    config = micro_config("squad_v2" if version_2 else "squad", f"validation_file={path}",
                          "max_seq_length=40", "doc_stride=16", "max_query_length=12")
    task = tasks.get_task(config)
    examples = task.load("validation")
    features = task.featurize(examples, tokenizer, 40, training=True)
    long_windows = [f for f in features if f["_example_index"] == 0]
    assert len(long_windows) > 2 and long_windows[0]["start_position"] == 0
    assert long_windows[-1]["start_position"] > 0  # the answer is in a later window
    records = {r["id"]: r for r in task.predict(examples, features, oracle_outputs(features))}
    assert records["long"]["answer"] == "Zürich, Switzerland"
    assert records["quote"]["answer"] == "“Blue Door”"
    assert records["owner"]["answer"] == "Dr. O'Neil's"
    if version_2:
        assert records["none"]["answer"] == "" and records["none"]["null_score_diff"] > 0
    scores = task.evaluate(examples, features, oracle_outputs(features))
    assert scores["exact_match"] == 100.0 and scores["f1"] == 100.0
    # Predicting "Zürich" for "Zürich, Switzerland": EM 0, F1 2/3 on that question.
    scores = task.evaluate(examples, features, oracle_outputs(features, True))
    n = len(examples)
    assert scores["exact_match"] == pytest.approx(100 * (n - 1) / n)
    assert scores["f1"] == pytest.approx(100 * (n - 1 + 2 / 3) / n)


@pytest.mark.parametrize("threshold,empty", [(0.0, True), (1.5, False)])
def test_v2_empty_answer_when_the_null_score_beats_the_best_span_by_the_threshold(
        tmp_path, tokenizer, threshold, empty):
    """The unanswerable question gets null score 1 + 1 = 2 ([CLS]) and a best span of
    score 0.5 + 0.5 = 1: null_score_diff 1. Threshold 0: "" (NoAns EM 100); threshold
    1.5: the span (NoAns EM 0). An inverted comparison, a rule that ignores the
    threshold, or one that never answers "" fails one of the two cases."""
    path = squad_json(tmp_path / "dev.json", True)
    config = micro_config("squad_v2", f"validation_file={path}", "max_seq_length=40",
                          "doc_stride=16", "max_query_length=12",
                          f"null_score_diff_threshold={threshold}")
    task = tasks.get_task(config)
    examples = task.load("validation")
    features = task.featurize(examples, tokenizer, 40, training=True)
    outputs = oracle_outputs(features)
    none = [e["id"] for e in examples].index("none")
    windows = [(f, o) for f, o in zip(features, outputs) if f["_example_index"] == none]
    for logits in (x for _, o in windows for x in o.values()):  # every window: null 2
        logits[:] = -10.0
        logits[0] = 1.0
    feature, out = windows[0]
    span = next(p for p, c in enumerate(feature["_token_to_context"])
                if c >= 0 and feature["_max_context"][p])
    out["start_logits"][span] = out["end_logits"][span] = 0.5
    records = {r["id"]: r for r in task.predict(examples, features, outputs)}
    assert records["none"]["null_score_diff"] == pytest.approx(1.0)
    offsets = feature["_offsets"][feature["_token_to_context"][span]]
    assert records["none"]["answer"] == ("" if empty else SHORT_CONTEXT[slice(*offsets)])
    assert records["none"]["answer"] or empty  # a real span, not "" by accident
    scores = task.evaluate(examples, features, outputs)
    assert scores["HasAns_exact_match"] == 100.0
    assert scores["NoAns_exact_match"] == (100.0 if empty else 0.0)


@pytest.mark.long
def test_squad_v2_end_to_end_on_json_fixtures(tmp_path):
    train = squad_json(tmp_path / "train.json", True)
    config = micro_config("squad_v2", f"train_file={train}", f"validation_file={train}",
                          "max_seq_length=48", "doc_stride=16", "max_query_length=12")
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        results = job.finetune(config, str(tmp_path / "run"))
    assert {"exact_match", "f1", "HasAns_f1", "NoAns_f1"} <= set(results["validation"])
    assert os.path.isdir(tmp_path / "run" / "best")
    model = inference.load_finetuned(str(tmp_path / "run"))
    [record] = model.predict([{"question": "Where was it signed?", "context": SHORT_CONTEXT}])
    assert record["id"] == "0" and record["answer"] in SHORT_CONTEXT
    assert record["answer"] == SHORT_CONTEXT[record["start_char"]:record["end_char"]]
    with pytest.raises(ValueError, match="'question' and 'context'"):
        model.predict(["just a text"])


def test_squad_tfds_mock_examples_featurize(tokenizer):
    task = tasks.get_task(micro_config("squad_v2"))
    with tfds.testing.mock_data(num_examples=3):
        examples = task.load("validation")
    assert len(examples) == 3 and {"id", "question", "context", "answers"} <= set(examples[0])
    assert task.featurize(examples, tokenizer, 64, training=True)
