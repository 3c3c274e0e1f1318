"""Ensembles: `predict` and `evaluate` over several fine-tuned models (or every seed of
a multi-seed workdir) average the members' outputs and report each member's metric."""

import json
import shutil

import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.finetune import cli, ensemble, selection
from bert_jax.finetune.tasks.tagging import TaggingTask
from bert_jax.train.config_loader import load_config

from helpers.finetune import micro_config

POSITIVE = ["a wonderful film", "great acting and a great story", "i loved it"]
NEGATIVE = ["a dull mess", "boring and far too long", "i hated it"]


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ensemble")
    path = tmp / "train.tsv"
    path.write_text("sentence\tsentiment\n" + "".join(
        f"{t}\t{label}\n" for ts, label in ((POSITIVE, "pos"), (NEGATIVE, "neg")) for t in ts))
    config = micro_config("csv", f"train_file={path}", f"validation_file={path}",
                          "text_column=sentence", "label_column=sentiment", "seeds=1,2",
                          "num_train_epochs=1")
    workdir = tmp / "run"
    selection.run_finetune(config, str(workdir))
    return workdir, path


def predictions(tmp_path, name, *workdirs):
    inputs = tmp_path / "in.txt"
    inputs.write_text("a great story\ni hated the acting\n")
    out = tmp_path / f"{name}.jsonl"
    assert cli.predict_main(["--model", *map(str, workdirs), "--input", str(inputs),
                             "--output", str(out)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_ensemble_averages_the_members_probabilities(two_seeds, tmp_path):
    workdir, _ = two_seeds
    members = [predictions(tmp_path, f"seed{s}", workdir / f"seed_{s}") for s in (1, 2)]
    both = predictions(tmp_path, "both", workdir / "seed_1", workdir / "seed_2")
    for i, record in enumerate(both):
        for label in ("neg", "pos"):
            mean = np.mean([m[i]["probabilities"][label] for m in members])
            assert record["probabilities"][label] == pytest.approx(mean, abs=1e-6)
        assert record["label"] == max(record["probabilities"], key=record["probabilities"].get)


def test_evaluate_reports_the_ensemble_beside_each_member(two_seeds, tmp_path, capsys):
    workdir, _ = two_seeds
    assert cli.evaluate_main(["--model", str(workdir), "--ensemble"]) == 0
    results = json.loads((workdir / "evaluate_results.json").read_text())["validation"]
    members = results["members"]
    assert sorted(members) == [str(workdir / "seed_1"), str(workdir / "seed_2")]
    assert 0.0 <= results["accuracy"] <= 1.0
    for metrics in members.values():  # each member's as evaluating it alone gives
        assert set(metrics) == set(results) - {"members"}
    assert cli.evaluate_main(["--model", str(workdir / "seed_1")]) == 0
    alone = json.loads((workdir / "seed_1" / "evaluate_results.json").read_text())
    assert alone["validation"] == members[str(workdir / "seed_1")]
    assert "ensemble of 2" in capsys.readouterr().err


def test_members_that_featurize_differently_are_refused(two_seeds, tmp_path):
    workdir, _ = two_seeds
    other = tmp_path / "other"
    shutil.copytree(workdir / "seed_2", other)
    model_file = other / "best" / "bert_jax.json"
    saved = json.loads(model_file.read_text())
    saved["task"]["config"]["max_seq_length"] = 16
    model_file.write_text(json.dumps(saved))
    with pytest.raises(UserError, match="differ in their max_seq_length"):
        ensemble.Ensemble([str(workdir / "seed_1"), str(other)])


def test_taggers_average_token_probabilities_and_crfs_are_refused():
    task = TaggingTask(load_config("finetune.py:conll", ["crf=False"]), "conll")
    outputs = [{"tags": np.array([0, 1]), "probabilities": np.array([[0.6, 0.4], [0.1, 0.9]])},
               {"tags": np.array([1, 1]), "probabilities": np.array([[0.3, 0.7], [0.4, 0.6]])}]
    combined = task.combine_outputs(outputs)
    np.testing.assert_array_equal(combined["tags"], [1, 1])  # 0.45 vs 0.55, then 0.25 vs 0.75
    task = TaggingTask(load_config("finetune.py:conll", ["crf=True"]), "conll")
    with pytest.raises(UserError, match="CRF"):
        task.combine_outputs(outputs)
