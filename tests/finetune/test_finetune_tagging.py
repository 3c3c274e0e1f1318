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

from bert_jax.finetune import cli, files, inference, job, tasks
from bert_jax.finetune.tasks import crf, tagging
from bert_jax.models.presets import preset
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer, text_io

from helpers.finetune import SENTENCES, micro_config, shared_compilation_cache, write_conll


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


@pytest.mark.parametrize("use_crf", [False, True])
def test_classifier_starts_at_the_label_frequencies(tmp_path, use_crf):
    """The initial tag distribution is the training prior (loss = the label entropy),
    so the first steps do not spend themselves learning it (docs/chinese.md)."""
    import flax.linen as nn
    import jax
    path = write_conll(tmp_path / "train.conll", SENTENCES)
    sentences = files.read_conll(path)
    config = micro_config("conll", f"train_file={path}", f"crf={use_crf}")
    task = tasks.get_task(config)
    task.prepare(sentences)
    tags = [t for s in sentences for t in s["tags"]]
    frequency = np.array([max(tags.count(n), 1) for n in task.label_names]) / (
        len(tags) + len(task.label_names))
    bert = preset("tiny", vocab_size=100, num_hidden_layers=1, hidden_size=32,
                  num_attention_heads=2, intermediate_size=64)
    init = lambda: nn.unbox(task.model(bert).init(jax.random.key(0),
                                                  jnp.ones((1, 8), jnp.int32)))["params"]
    np.testing.assert_allclose(init()["classifier"]["bias"], np.log(frequency), rtol=1e-5)
    task.config.label_prior_bias = False  # the zeros of BERT's head
    assert not init()["classifier"]["bias"].any()


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


@pytest.mark.long
@pytest.mark.parametrize("use_crf", [False, True])
def test_conll_end_to_end_and_predict(tmp_path, use_crf, capsys):
    train = write_conll(tmp_path / "train.conll", SENTENCES, repeat=4)
    dev = write_conll(tmp_path / "dev.conll", SENTENCES)
    config = micro_config("conll", f"train_file={train}", f"validation_file={dev}",
                          f"test_file={dev}", f"crf={use_crf}", "num_train_epochs=2")
    workdir = str(tmp_path / "run")
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        results = job.finetune(config, workdir)
        assert {"f1", "precision", "recall", "token_accuracy"} <= set(results["validation"])
        assert "f1" in results["test"]
        inputs = tmp_path / "in.txt"
        inputs.write_text("Mary lives in Rome .\n")
        assert cli.predict_main(["--model", workdir, "--input", str(inputs)]) == 0
        in_memory = inference.load_finetuned(workdir).predict(
            ["Mary lives in Rome .", ["Mary", "lives", "in", "Rome", "."]])
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["words"] == ["Mary", "lives", "in", "Rome", "."]
    assert len(record["tags"]) == 5
    assert in_memory == [record, record]
    assert os.path.exists(os.path.join(workdir, "predictions", "test.jsonl"))


# --- long sentences: windows of whole words ---------------------------------------

# 40 words of 1 to 6 word pieces ("Unbelievably" has 6, "Acme" 4, "Zoë" 2).
LONG_WORDS = ("Unbelievably , Zoë won in Berlin against Acme Corporation yesterday .".split()
              * 4)[:40]
LONG_TAGS = ("O O B-PER O O B-LOC O B-ORG I-ORG O O".split() * 4)[:40]


def _task(examples, *overrides):
    task = tasks.get_task(micro_config("conll", *overrides))
    task.prepare(examples)
    return task


def _word_pieces(tokenizer, words):
    """Each word's ids, tokenized on its own (independent of the task's offsets)."""
    return [tokenizer.encode(w).ids for w in words]


def _window_words(feature):
    return [w for w, p in enumerate(feature["_word_positions"]) if p >= 0]


def test_long_sentence_gives_overlapping_word_windows(tokenizer):
    example = {"words": LONG_WORDS, "tags": LONG_TAGS}
    task = _task([example])
    features = task.featurize([example], tokenizer, 16, training=True)
    pieces = _word_pieces(tokenizer, LONG_WORDS)
    assert sum(map(len, pieces)) > 14 and len(features) > 2
    index = {t: i for i, t in enumerate(task.label_names)}
    spans = []
    for i, f in enumerate(features):
        assert f["feature_index"] == i and f["_example_index"] == 0
        assert len(f["input_ids"]) <= 16 and len(f["label_ids"]) == len(f["input_ids"])
        assert f["input_ids"][0] == tokenizer.cls_id and f["input_ids"][-1] == tokenizer.sep_id
        words = _window_words(f)
        first, end = words[0], words[-1] + 1
        assert words == list(range(first, end))
        # Whole words only: the window is exactly its words' pieces.
        assert f["input_ids"][1:-1] == [t for w in range(first, end) for t in pieces[w]]
        for w in words:  # every word's first piece carries its gold tag, in every window
            p = f["_word_positions"][w]
            assert f["label_ids"][p] == index[LONG_TAGS[w]] and f["label_weights"][p] == 1
        assert f["label_weights"].sum() == len(words)
        spans.append((first, end))
    assert spans[0][0] == 0 and spans[-1][1] == len(LONG_WORDS)
    for (a, b), (next_a, next_b) in zip(spans, spans[1:]):
        assert a < next_a < b < next_b  # overlap, and progress at both ends
        # The overlap is whole words of at most tagging_stride (16 // 4) tokens.
        assert 0 < sum(len(pieces[w]) for w in range(next_a, b)) <= 4


@pytest.mark.parametrize("stride", range(14))
def test_word_windows_cover_every_word_for_any_stride(tokenizer, stride):
    ids, starts, ends = text_io.word_token_spans(tokenizer, LONG_WORDS)
    assert ids == [t for p in _word_pieces(tokenizer, LONG_WORDS) for t in p]
    windows = tagging.word_windows(starts, ends, 14, stride)
    assert windows[0][0] == 0 and windows[-1][1] == len(LONG_WORDS)
    for a, b in windows:
        assert ends[b - 1] - starts[a] <= 14
    for (a, b), (next_a, next_b) in zip(windows, windows[1:]):
        assert a < next_a <= b < next_b and ends[b - 1] - starts[next_a] <= stride


def test_word_longer_than_window_keeps_its_first_pieces(tokenizer):
    example = {"words": ["won", "Unbelievably", "Zoë"], "tags": ["O", "B-PER", "O"]}
    task = _task([example])
    features = task.featurize([example], tokenizer, 5, training=True)
    pieces = _word_pieces(tokenizer, example["words"])
    assert [_window_words(f) for f in features] == [[0], [1], [2]]
    cut = features[1]
    assert cut["input_ids"] == [tokenizer.cls_id, *pieces[1][:3], tokenizer.sep_id]
    assert cut["label_ids"][1] == task.label_names.index("B-PER")
    assert cut["label_weights"].tolist() == [0, 1, 0, 0, 0]


def _context(feature, word):
    """min(pieces left of the word, pieces right of it) in the feature's window."""
    positions = [p for p in feature["_word_positions"] if p >= 0]
    p = feature["_word_positions"][word]
    after = [q for q in positions if q > p]
    end = after[0] if after else len(feature["input_ids"]) - 1  # [SEP]
    return min(p - 1, len(feature["input_ids"]) - 1 - end)


def test_each_word_takes_the_tag_of_its_max_context_window(tokenizer):
    short = [{"words": w.split(), "tags": t.split()} for w, t in SENTENCES[:2]]
    long = {"words": LONG_WORDS, "tags": [f"T{i}" for i in range(40)]}
    examples = [short[0], long, short[1]]
    task = _task(examples)
    features = task.featurize(examples, tokenizer, 16, training=False)
    windows = [f for f in features if f["_example_index"] == 1]
    assert len(windows) > 2
    # Each feature predicts one tag everywhere: the i-th label for feature i.
    outputs = [{"tags": np.full(len(f["input_ids"]), i, np.int32)} for i, f in
               enumerate(features)]
    predicted = task.predict(examples, features, outputs)
    assert [r["words"] for r in predicted] == [ex["words"] for ex in examples]
    assert predicted[0]["tags"] == [task.label_names[0]] * len(short[0]["words"])
    assert predicted[2]["tags"] == [task.label_names[len(features) - 1]] * len(short[1]["words"])
    expected, first_wins, last_wins = [], [], []
    for w in range(len(LONG_WORDS)):
        holding = [f for f in windows if f["_word_positions"][w] >= 0]
        best = max(holding, key=lambda f: (_context(f, w), -f["feature_index"]))
        expected.append(task.label_names[best["feature_index"]])
        first_wins.append(task.label_names[holding[0]["feature_index"]])
        last_wins.append(task.label_names[holding[-1]["feature_index"]])
    assert predicted[1]["tags"] == expected
    assert expected != first_wins and expected != last_wins  # the rule matters here
    assert set(expected) == {task.label_names[f["feature_index"]] for f in windows}


def test_short_sentences_featurize_as_one_window(tokenizer):
    examples = [{"words": w.split(), "tags": t.split()} for w, t in SENTENCES]
    task = _task(examples)
    features = task.featurize(examples, tokenizer, 32, training=True)
    assert len(features) == len(examples)
    for i, (ex, f) in enumerate(zip(examples, features)):
        # The layout of a single window, computed as before windows existed.
        ids, first = tagging.word_token_positions(tokenizer, ex["words"], 30)
        assert min(first) >= 0
        assert f["input_ids"] == [tokenizer.cls_id, *ids, tokenizer.sep_id]
        assert f["segment_ids"] == [0] * (len(ids) + 2)
        assert f["feature_index"] == i and f["_word_positions"] == [p + 1 for p in first]
        labels, weights = np.zeros(len(ids) + 2, np.int32), np.zeros(len(ids) + 2, np.float32)
        labels[[p + 1 for p in first]] = [task.label_names.index(t) for t in ex["tags"]]
        weights[[p + 1 for p in first]] = 1
        np.testing.assert_array_equal(f["label_ids"], labels)
        np.testing.assert_array_equal(f["label_weights"], weights)
    outputs = [{"tags": f["label_ids"]} for f in features]
    assert task._word_tags(features, outputs) == [ex["tags"] for ex in examples]


@pytest.mark.parametrize("stride", [-1, 14, 100, 2.5])
def test_bad_tagging_stride_is_rejected(tokenizer, stride):
    example = {"words": LONG_WORDS, "tags": LONG_TAGS}
    with pytest.raises(ValueError, match="tagging_stride"):  # at load (-1, 2.5) or later
        _task([example], f"tagging_stride={stride}").featurize([example], tokenizer, 16,
                                                               training=True)
