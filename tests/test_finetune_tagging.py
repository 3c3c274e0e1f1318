"""Token classification: CoNLL files, tfds conll2003 (mock), first-sub-token labels,
the CRF against brute force, and a tiny end-to-end run with predict."""

from __future__ import annotations

import itertools
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from bert_jax.finetune import cli, crf, files, tagging, tasks, trainer
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from test_finetune_util import micro_config, shared_compilation_cache

SENTENCES = [
    ("John Smith lives in Paris .", "B-PER I-PER O O B-LOC O"),
    ("Acme Corporation hired Mary yesterday .", "B-ORG I-ORG O B-PER O O"),
    ("Berlin and Rome are capitals .", "B-LOC O B-LOC O O O"),
    ("Unbelievably , Zoë won .", "O O B-PER O O"),
]


def write_conll(path, sentences, repeat=1):
    with open(path, "w", encoding="utf-8") as f:
        f.write("-DOCSTART- -X- O O\n\n")
        for _ in range(repeat):
            for words, tags in sentences:
                for w, t in zip(words.split(), tags.split()):
                    f.write(f"{w} NNP B-NP {t}\n")
                f.write("\n")
    return str(path)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(DEFAULT_VOCAB)


def test_read_conll_and_first_subtoken_labels(tmp_path, tokenizer):
    path = write_conll(tmp_path / "train.conll", SENTENCES)
    sentences = files.read_conll(path)
    assert sentences[0]["words"][:2] == ["John", "Smith"] and sentences[0]["tags"][0] == "B-PER"
    task = tasks.get_task(micro_config("conll", f"train_file={path}"))
    task.prepare(sentences)
    assert task.label_names[0] == "O" and task.selection_metric == "f1"
    feature = task.featurize(sentences[3:], tokenizer, 32, training=True)[0]
    # One labeled position per word, at its first sub-token.
    assert int(feature["label_weights"].sum()) == len(sentences[3]["words"])
    ids, first = tagging.word_token_positions(tokenizer, ["Unbelievably", ",", "Zoë"], 30)
    assert first[0] == 0 and first[1] > 1 and first[2] == first[1] + 1


def _brute_force(emissions, transitions, start, end, length):
    scores = {}
    for path in itertools.product(range(emissions.shape[1]), repeat=length):
        s = start[path[0]] + end[path[-1]] + sum(emissions[t, path[t]] for t in range(length))
        s += sum(transitions[path[t - 1], path[t]] for t in range(1, length))
        scores[path] = s
    return scores


def test_crf_matches_brute_force():
    rng = np.random.default_rng(0)
    emissions = rng.normal(size=(2, 5, 3)).astype(np.float32)
    transitions, start, end = (rng.normal(size=s).astype(np.float32) for s in ((3, 3), 3, 3))
    lengths = [4, 2]
    # Labeled positions are scattered among sub-tokens: compact moves them first.
    weights = np.zeros((2, 5), np.float32)
    weights[0, [0, 1, 3, 4]] = 1
    weights[1, [1, 3]] = 1
    tags = rng.integers(0, 3, size=(2, 5))
    mask, em, tg = crf.compact(jnp.asarray(weights), jnp.asarray(emissions), jnp.asarray(tags))
    ll = crf.log_likelihood(em, tg, mask, transitions, start, end)
    best = crf.viterbi(em, mask, transitions, start, end)
    for b, n in enumerate(lengths):
        scores = _brute_force(np.asarray(em[b]), transitions, start, end, n)
        log_z = np.log(np.sum(np.exp(list(scores.values()))))
        gold = tuple(int(t) for t in np.asarray(tg[b, :n]))
        assert float(ll[b]) == pytest.approx(scores[gold] - log_z, abs=1e-4)
        assert tuple(int(t) for t in np.asarray(best[b, :n])) == max(scores, key=scores.get)


def test_conll2003_mock_examples(tokenizer):
    task = tasks.get_task(micro_config("conll2003"))
    with tfds.testing.mock_data(num_examples=4):
        examples = task.load("validation")
        task.prepare(examples)
    assert task.label_names[:3] == ["O", "B-PER", "I-PER"] and len(examples) == 4
    assert all(set(ex["tags"]) <= set(task.label_names) for ex in examples)
    assert task.featurize(examples, tokenizer, 32, training=True)


@pytest.mark.parametrize("use_crf", [False, True])
def test_conll_end_to_end_and_predict(tmp_path, use_crf, capsys):
    train = write_conll(tmp_path / "train.conll", SENTENCES, repeat=4)
    dev = write_conll(tmp_path / "dev.conll", SENTENCES)
    config = micro_config("conll", f"train_file={train}", f"validation_file={dev}",
                          f"test_file={dev}", f"crf={use_crf}", "num_train_epochs=2")
    workdir = str(tmp_path / "run")
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        results = trainer.finetune(config, workdir)
        assert {"f1", "precision", "recall", "token_accuracy"} <= set(results["validation"])
        assert "f1" in results["test"]
        inputs = tmp_path / "in.txt"
        inputs.write_text("Mary lives in Rome .\n")
        assert cli.main(["--workdir", workdir, "--input", str(inputs)], "predict") == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["words"] == ["Mary", "lives", "in", "Rome", "."]
    assert len(record["tags"]) == 5
    assert os.path.exists(os.path.join(workdir, "predictions", "test.jsonl"))
