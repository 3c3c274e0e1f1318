"""The multiple_choice task: SWAG-layout CSV and JSONL list files, [C, L] features
batched to [B, C, L], a fine-tuning run that learns a small fixture, evaluate and
predict, bad input, and the HF BertForMultipleChoice export and back."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

from bert_jax import cli as bert_jax_cli
from bert_jax.errors import UserError
from bert_jax.finetune import inference, job, packing, selection, tasks
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.tokenization.text_io import encode_pair
from bert_jax.weights import pretrained

from helpers.finetune import CONFIG, micro_config, shared_compilation_cache

ANIMALS = ["cat", "dog", "horse", "bird", "cow", "fish", "sheep", "mouse"]
THINGS = ["chair", "table", "door", "box", "car", "book", "cup", "road"]
PLACES = ["garden", "house", "field", "street"]
SWAG_HEADER = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
               "ending0", "ending1", "ending2", "ending3", "label"]


def swag_rows(count: int, seed: int) -> list[dict]:
    """SWAG-layout rows whose right ending names the animal of the context; the wrong
    ones name things (a pattern a one-layer model learns in a few epochs)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        animal, place = rng.choice(ANIMALS), rng.choice(PLACES)
        endings = [f"{t} stands still ." for t in rng.choice(THINGS, 3, replace=False)]
        label = int(rng.integers(4))
        endings.insert(label, f"{animal} stands still .")
        sent1, sent2 = f"a {animal} walks into the {place} .", "then the"
        rows.append({"video-id": f"v{i}", "fold-ind": str(i), "startphrase": f"{sent1} {sent2}",
                     "sent1": sent1, "sent2": sent2, "gold-source": "gold",
                     **{f"ending{k}": e for k, e in enumerate(endings)}, "label": str(label)})
    return rows


def write_csv(path, rows, header=SWAG_HEADER):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def as_list_layout(rows):
    """The same examples as JSONL objects with a list of endings and no question."""
    return [{"context": f"{r['sent1']} {r['sent2']}", "label": int(r["label"]),
             "endings": [r[f"ending{k}"] for k in range(4)]} for r in rows]


LIST_LAYOUT = ("context_column=context", "question_column=", "ending_columns=endings")


def test_reads_the_swag_csv_layout_into_choice_rows(tmp_path):
    rows = swag_rows(3, seed=0)
    config = micro_config("multiple_choice", f"train_file={write_csv(tmp_path / 't.csv', rows)}")
    task = tasks.get_task(config)
    examples = task.load("train")
    assert [ex["label"] for ex in examples] == [int(r["label"]) for r in rows]
    assert examples[0]["endings"] == [rows[0][f"ending{k}"] for k in range(4)]
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    features = task.featurize(examples, tokenizer, 32, training=True)
    first = features[0]
    assert len(first["input_ids"]) == len(first["segment_ids"]) == 4
    # Row k: [CLS] sent1 [SEP] sent2 + " " + ending_k [SEP]
    for k in range(4):
        expected = encode_pair(tokenizer, rows[0]["sent1"],
                               f"{rows[0]['sent2']} {rows[0][f'ending{k}']}", 32)
        assert (first["input_ids"][k], first["segment_ids"][k]) == expected
    assert first["label"] == int(rows[0]["label"])


def test_reads_the_jsonl_list_layout_and_an_unlabeled_test_file(tmp_path):
    rows = as_list_layout(swag_rows(3, seed=1))
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    unlabeled = write_jsonl(tmp_path / "u.jsonl", [{**r, "label": -1} for r in rows])
    config = micro_config("multiple_choice", f"train_file={path}", f"test_file={unlabeled}",
                          *LIST_LAYOUT)
    task = tasks.get_task(config)
    examples = task.load("train")
    assert [ex["endings"] for ex in examples] == [r["endings"] for r in rows]
    assert examples[0]["question"] is None and examples[0]["context"] == rows[0]["context"]
    assert [ex["label"] for ex in task.load("test")] == [None] * 3
    assert task.test_splits == ("test",)
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    [feature] = task.featurize(examples[:1], tokenizer, 32, training=False)
    assert feature["input_ids"][2] == encode_pair(tokenizer, rows[0]["context"],
                                                  rows[0]["endings"][2], 32)[0]


def test_choice_features_batch_to_batch_choices_length():
    features = [{"input_ids": [[2, 5, 3], [2, 6, 7, 3]], "segment_ids": [[0, 0, 0], [0, 0, 1, 1]],
                 "feature_index": i, "label": i % 2} for i in range(3)]
    [batch] = packing.padded_batches(features, 4, 64, bucketing=True)
    assert batch["input_ids"].shape == batch["input_mask"].shape == (4, 2, 16)
    np.testing.assert_array_equal(batch["input_ids"][1, :, :5], [[2, 5, 3, 0, 0], [2, 6, 7, 3, 0]])
    np.testing.assert_array_equal(batch["input_mask"][1, :, :5], [[1, 1, 1, 0, 0],
                                                                 [1, 1, 1, 1, 0]])
    np.testing.assert_array_equal(batch["segment_ids"][0, 1, :4], [0, 0, 1, 1])
    np.testing.assert_array_equal(batch["example_weights"], [1, 1, 1, 0])
    # The filler row still attends to one token per choice (no all-masked rows).
    np.testing.assert_array_equal(batch["input_mask"][3].sum(-1), [1, 1])
    assert batch["label"].tolist() == [0, 1, 0, 0]
    [flat] = packing.padded_batches([{"input_ids": [2, 3], "segment_ids": [0, 0],
                                      "feature_index": 0}], 2, 8)
    assert flat["input_ids"].shape == (2, 8)  # one sequence per feature: [B, L] as before


@pytest.fixture(scope="module", autouse=True)
def compile_cache(tmp_path_factory):
    """One compilation of the eval step serves the runs, evaluate, predict and export."""
    with shared_compilation_cache(str(tmp_path_factory.getbasetemp() / "mc_jax_cache")):
        yield


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """A fine-tuned workdir on the SWAG-layout fixture: (workdir, results, data dir)."""
    data = tmp_path_factory.mktemp("mc_data")
    train = write_csv(data / "train.csv", swag_rows(64, seed=2))
    dev = write_csv(data / "dev.csv", swag_rows(32, seed=3))
    test = write_csv(data / "test.csv", [{**r, "label": ""} for r in swag_rows(8, seed=4)])
    workdir = str(tmp_path_factory.mktemp("mc_run") / "run")
    config = micro_config("multiple_choice", f"train_file={train}", f"validation_file={dev}",
                          f"test_file={test}", "num_train_epochs=3", "length_bucketing=true")
    return workdir, selection.run_finetune(config, workdir), data


@pytest.mark.long
def test_finetuning_learns_the_fixture_then_evaluate_and_predict(finetuned, tmp_path, capsys):
    workdir, results, data = finetuned
    assert results["selection_metric"] == "accuracy"
    # Chance is 0.25; the untrained model scores 0.47 (the repeated word stands out).
    assert results["validation"]["accuracy"] >= 0.75
    records = [json.loads(line) for line in
               open(os.path.join(workdir, "predictions", "test.jsonl"), encoding="utf-8")]
    assert len(records) == 8 and "test" not in results  # unlabeled: predicted, not scored
    assert bert_jax_cli.main(["evaluate", "--model", workdir]) == 0
    with open(os.path.join(workdir, "evaluate_results.json")) as f:
        assert json.load(f)["validation"]["accuracy"] == results["validation"]["accuracy"]

    jsonl = write_jsonl(tmp_path / "in.jsonl", [  # bert-jax predict reads the training layout
        {"sent1": "a dog walks into the field .", "sent2": "then the",
         **{f"ending{k}": e for k, e in enumerate(
             ["cup stands still .", "door stands still .", "dog stands still .",
              "car stands still ."])}}])
    out = tmp_path / "out.jsonl"
    assert bert_jax_cli.main(["predict", "--model", workdir, "--input", jsonl,
                              "--output", str(out)]) == 0
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["label"] == 2 and record["ending"] == "dog stands still ."
    assert len(record["probabilities"]) == 4
    assert sum(record["probabilities"]) == pytest.approx(1.0, abs=1e-4)

    model = inference.load_finetuned(workdir)
    [in_memory] = model.predict([{"context": "a dog walks into the field .",
                                  "question": "then the", "endings": [
                                      "cup stands still .", "door stands still .",
                                      "dog stands still .", "car stands still ."]}])
    assert in_memory["label"] == 2
    assert in_memory["probabilities"] == pytest.approx(record["probabilities"], abs=1e-5)
    with pytest.raises(UserError, match="input 0: expected a dict with 'context'"):
        model.predict(["a dog walks"])

    # predict also reads the documented JSONL layout ({"context", "question", "endings"}),
    # and a file in neither layout names the columns, not a flag predict does not take.
    documented = write_jsonl(tmp_path / "documented.jsonl", [
        {"context": "a dog walks into the field .", "question": "then the", "endings": [
            "cup stands still .", "door stands still .", "dog stands still .",
            "car stands still ."]}])
    assert bert_jax_cli.main(["predict", "--model", workdir, "--input", documented,
                              "--output", str(out)]) == 0
    assert json.loads(out.read_text())["label"] == 2
    other = write_jsonl(tmp_path / "other.jsonl", [{"story": "a dog", "options": ["a", "b"]}])
    capsys.readouterr()
    assert bert_jax_cli.main(["predict", "--model", workdir, "--input", other]) == 2
    err = capsys.readouterr().err
    assert "predict reads JSONL rows" in err and "--config" not in err, err


@pytest.mark.long
def test_export_to_transformers_gives_the_same_logits_and_converts_back(finetuned, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bert_jax.weights import cli as convert_cli
    from bert_jax.weights import convert

    workdir, _, data = finetuned
    hf_dir, back = str(tmp_path / "hf"), str(tmp_path / "back")
    assert bert_jax_cli.main(["convert", "--model", workdir, "--to_hf", hf_dir]) == 0
    hf_model = transformers.BertForMultipleChoice.from_pretrained(hf_dir).eval()

    model = inference.load_finetuned(workdir)
    examples = model.task.load("validation")[:6]
    features = model.task.featurize(examples, model.tokenizer, 32, training=False)
    [batch] = packing.padded_batches(features, 6, 32)
    ours = np.stack([o["probabilities"] for o in model.outputs(features)])
    with torch.no_grad():
        logits = hf_model(**{name: torch.from_numpy(batch[key]).long() for name, key in (
            ("input_ids", "input_ids"), ("attention_mask", "input_mask"),
            ("token_type_ids", "segment_ids"))}).logits
    np.testing.assert_allclose(torch.softmax(logits, -1).numpy(), ours, atol=1e-5)

    assert convert_cli.convert_main(["--from_hf", hf_dir, "--output", back]) == 0
    converted, saved = pretrained.load(back), pretrained.load(os.path.join(workdir, "best"))
    assert converted.head.kind == "multiple_choice"
    for (path, a), (_, b) in zip(pretrained._flat(converted.params).items(),
                                 pretrained._flat(saved.params).items()):
        np.testing.assert_array_equal(a, b, err_msg=path)
    # ... and exported again it is still a BertForMultipleChoice.
    assert convert.hf_architecture(converted.params, converted.task)[0] == \
        "BertForMultipleChoice"
    from bert_jax.serve import export  # the serving export says it does not take one yet
    with pytest.raises(ValueError, match="exporting 'multiple_choice' models is not supported"):
        export.serving_function(saved)


@pytest.mark.long
def test_distills_into_a_student_over_the_choices(finetuned, tmp_path):
    """A multiple-choice teacher distills (KL over the choices) with hidden-state and
    attention matching over the [B * C, L] sequences."""
    from bert_jax.finetune import distill
    workdir, _, _ = finetuned
    teacher = distill.load_finetuned_teacher(workdir)
    config = distill.distill_config(teacher, os.path.join(workdir, "best"), [
        "student_layers=1", "hidden_weight=1.0", "attention_weight=1.0", "alpha=0",
        "num_train_epochs=1", "log_every_steps=1", "hidden_dropout_prob=0.0",
        "attention_probs_dropout_prob=0.0"])
    results = distill.distill(config, teacher, str(tmp_path / "student"))
    assert "accuracy" in results["validation"]
    logged = [json.loads(line) for line in open(tmp_path / "student" / "metrics.jsonl")]
    train = [m for m in logged if "train/soft_loss" in m]
    assert train and all(np.isfinite(m["train/hidden_loss"]) for m in train)
    # Without dropout the student starts as the teacher itself (its one layer): equal
    # outputs and states on every sequence of every choice.
    assert train[0]["train/soft_loss"] < 1e-6 and train[0]["train/hidden_loss"] < 1e-6


def bad(tmp_path, rows, *overrides, writer=write_csv, name="t.csv"):
    path = writer(tmp_path / name, rows) if rows is not None else str(tmp_path / name)
    return tasks.get_task(micro_config("multiple_choice", f"train_file={path}", *overrides))


@pytest.mark.parametrize("case, message", [
    ("no context column", r"t.csv has no context column 'sent1'; its columns are: .*'ending0'"),
    ("no ending column", r"t.csv has no ending column 'ending4'; its columns are"),
    ("label out of range", r"t.csv:3: label 4 is out of range for 4 endings \(0..3\)"),
    ("label not an index", r"t.csv:2: label 'b' is not an ending index \(0..3\)"),
    ("blank label", r"t.csv:2: no label \(column 'label'\); every training"),
    ("differing endings", r"t.jsonl:2: 3 endings, but the first row has 4"),
    ("one ending", r"t.jsonl:1: 1 ending\(s\); multiple choice needs at least 2"),
    ("endings not a list", r"t.jsonl:1: ending column 'endings' must hold a list of endings"),
    ("ending not a text", r"t.jsonl:1: an ending must be a text, got None"),
    ("plain text file", r"t.txt: multiple choice reads CSV, TSV or JSONL"),
    ("no rows", r"t.csv has no rows"),
])
def test_bad_files_fail_naming_the_file_and_line(tmp_path, case, message):
    rows = swag_rows(2, seed=5)
    listed = as_list_layout(rows)
    task = {
        "no context column": lambda: bad(tmp_path, [{k: v for k, v in r.items() if k != "sent1"}
                                                    for r in rows],
                                         writer=lambda p, r: write_csv(
                                             p, r, [h for h in SWAG_HEADER if h != "sent1"])),
        "no ending column": lambda: bad(tmp_path, rows, "ending_columns=ending0,ending4"),
        "label out of range": lambda: bad(tmp_path, [rows[0], {**rows[1], "label": "4"}]),
        "label not an index": lambda: bad(tmp_path, [{**rows[0], "label": "b"}]),
        "blank label": lambda: bad(tmp_path, [{**rows[0], "label": " "}]),
        "differing endings": lambda: bad(tmp_path, [listed[0], {**listed[1], "endings": [
            "a", "b", "c"]}], *LIST_LAYOUT, writer=write_jsonl, name="t.jsonl"),
        "one ending": lambda: bad(tmp_path, [{**listed[0], "endings": ["a"]}], *LIST_LAYOUT,
                                  writer=write_jsonl, name="t.jsonl"),
        "endings not a list": lambda: bad(tmp_path, [{**listed[0], "endings": "a b"}],
                                          *LIST_LAYOUT, writer=write_jsonl, name="t.jsonl"),
        "ending not a text": lambda: bad(tmp_path, [{**listed[0], "endings": [None, "b"]}],
                                         *LIST_LAYOUT, writer=write_jsonl, name="t.jsonl"),
        "plain text file": lambda: bad(tmp_path, None, name="t.txt"),
        "no rows": lambda: bad(tmp_path, []),
    }[case]()
    with pytest.raises(ValueError, match=message):  # UserError, or files' ValueError
        task.load("train")


def test_bad_config_and_inputs_fail_clearly(tmp_path):
    with pytest.raises(UserError, match="ending_columns must name distinct columns"):
        tasks.get_task(micro_config("multiple_choice", "ending_columns=a,a"))
    task = tasks.get_task(micro_config("multiple_choice"))
    with pytest.raises(UserError, match="task 'multiple_choice' needs --config.validation_file"):
        task.load("validation")
    examples = task.examples_from_inputs([{"context": "c", "endings": ["a", "b"]},
                                          {"context": "c", "endings": ["a", "b", "c"]}])
    with pytest.raises(UserError, match="examples with 2 and 3 endings"):
        task.featurize(examples, load_tokenizer(DEFAULT_VOCAB), 32, training=False)
    with pytest.raises(ValueError, match="does not support packing"):
        job.finetune(micro_config("multiple_choice", "packing=true"), str(tmp_path / "w"))


def test_finetune_command_exits_2_naming_the_missing_file(capsys, tmp_path):
    code = bert_jax_cli.main(["finetune", "--config", f"{CONFIG}:multiple_choice,tiny",
                              "--workdir", str(tmp_path / "w"), "--config.train_file=/no/such.csv",
                              "--config.validation_file=/no/such.csv"])
    err = capsys.readouterr().err
    assert code == 2 and err == "bert-jax finetune: error: no such file: /no/such.csv\n", err
