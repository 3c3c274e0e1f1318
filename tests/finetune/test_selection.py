"""BERT's selection protocol (`finetune.selection`): a grid of learning rates, epochs and
batch sizes, selected on validation only, runs sharing data and the compiled step."""

from __future__ import annotations

import json
import os

import pytest

from bert_jax.errors import UserError
from bert_jax.finetune import inference, job, selection
from bert_jax.train.config_loader import load_config

from helpers.finetune import (
    CONFIG,
    NEGATIVE,
    POSITIVE,
    micro_config,
    shared_compilation_cache,
    write_tsv,
)


@pytest.fixture(autouse=True)
def compile_cache(tmp_path):
    """Compiled programs shared with the other fine-tuning tests (same micro shapes)."""
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        yield


@pytest.fixture
def files(tmp_path):
    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    train = write_tsv(tmp_path / "train.tsv", rows * 3)
    dev = write_tsv(tmp_path / "dev.tsv", rows)
    # The test split is the dev texts with flipped labels: a selection that looked at
    # test would prefer the worst validation run.
    test = write_tsv(tmp_path / "test.tsv", [(t, "neg" if y == "pos" else "pos")
                                             for t, y in rows])
    return [f"train_file={train}", f"validation_file={dev}", f"test_file={test}",
            "text_column=sentence", "label_column=sentiment"]


def run_of(summary, workdir, name):
    with open(os.path.join(workdir, name, "eval_results.json")) as f:
        return json.load(f)


@pytest.mark.long
def test_grid_selects_on_validation_and_reports_the_selected_test(tmp_path, files):
    workdir = str(tmp_path / "grid")
    config = micro_config("csv", *files, "sweep.learning_rate=1e-6,1e-2", "num_train_epochs=6")
    summary = selection.run_finetune(config, workdir)
    assert summary["grid"]["learning_rate"] == [1e-6, 1e-2]
    names = [s["run_dir"] for s in summary["settings"]]
    assert names == ["lr1e-06", "lr0.01"]
    runs = {name: run_of(summary, workdir, name) for name in names}
    for setting in summary["settings"]:  # every run's validation score is recorded
        run = runs[setting["run_dir"]]
        assert run["learning_rate"] == setting["learning_rate"]
        assert setting["validation"] == run["validation"]
        assert setting["score"] == run["validation"]["accuracy"]
    best = max(names, key=lambda n: runs[n]["validation"]["accuracy"])
    assert runs["lr0.01"]["validation"]["accuracy"] > runs["lr1e-06"]["validation"]["accuracy"]
    assert summary["best_run"] == best == "lr0.01"
    assert summary["selected"] == {"learning_rate": 1e-2, "num_train_epochs": 6.0,
                                   "global_batch_size": 8}
    assert summary["test"] == runs[best]["test"]  # test of the selected run, not the best test
    assert summary["test"]["accuracy"] < runs["lr1e-06"]["test"]["accuracy"]
    with open(os.path.join(workdir, "eval_results.json")) as f:
        assert json.load(f)["best_run"] == best
    assert inference.load_finetuned(workdir).config.learning_rate == 1e-2  # the selected run


@pytest.mark.slow
def test_runs_share_data_and_compiled_step_and_match_fresh_runs(tmp_path, files):
    """A session's second run (another learning rate and epoch count) reuses the first
    run's features and compiled step, and gives exactly what a fresh run gives."""
    first = micro_config("csv", *files, "learning_rate=1e-3", "num_train_epochs=1")
    second = micro_config("csv", *files, "learning_rate=3e-3", "num_train_epochs=2")
    session = job.Finetuning(first)
    session.run(first, str(tmp_path / "a"))
    shared = session.run(second, str(tmp_path / "b"))
    [data] = session._prepared.values()
    [(step_fn, _)] = data.compiled.values()
    assert step_fn._cache_size() == 1
    fresh = job.finetune(second, str(tmp_path / "c"))
    for key in ("validation", "test", "kept_epoch", "train_steps", "learning_rate"):
        assert shared[key] == fresh[key], key
    losses = [[json.loads(line).get("train/loss") for line in open(tmp_path / d / "metrics.jsonl")]
              for d in ("b", "c")]
    assert losses[0] == losses[1]


@pytest.mark.long
def test_grid_with_seeds_averages_each_setting(tmp_path, files):
    workdir = str(tmp_path / "grid")
    config = micro_config("csv", *files, "sweep.global_batch_size=8,16", "num_train_epochs=1",
                          "seeds=1,2")
    summary = selection.run_finetune(config, workdir)
    assert [s["run_dir"] for s in summary["settings"]] == ["bs8", "bs16"]
    for setting in summary["settings"]:
        assert set(setting["validation"]) == {1, 2}
        scores = [v["accuracy"] for v in setting["validation"].values()]
        assert setting["score"] == pytest.approx(sum(scores) / 2)
    selected = max(summary["settings"], key=lambda s: s["score"])
    assert summary["selected"]["global_batch_size"] == selected["global_batch_size"]
    assert summary["validation"]["accuracy"]["mean"] == pytest.approx(selected["score"])
    assert set(summary["test"]["accuracy"]) == {"mean", "std"}
    assert summary["best_run"] == os.path.join(selected["run_dir"], f"seed_{summary['best_seed']}")


@pytest.mark.parametrize("key,value,message", [
    ("sweep.learning_rate", "2e-5,abc",
     "sweep.learning_rate must be a number or a comma-separated list"),
    ("sweep.global_batch_size", "16,16.5", "sweep.global_batch_size must hold ints"),
    ("sweep.num_train_epochs", "2,2", "sweep.num_train_epochs lists a value twice"),
])
def test_bad_lists_are_named(key, value, message):
    config = micro_config("csv", f"{key}={value}")
    with pytest.raises(UserError, match=message):
        selection.grid_of(config)


def test_a_single_run_is_a_plain_run(monkeypatch, tmp_path):
    """Without seeds or a sweep, fine-tuning is one job.finetune call on the config
    itself: no grid, no setting directories, no selection summary."""
    config = micro_config("csv")
    monkeypatch.setattr(selection, "run_grid", lambda *a: pytest.fail("went through the grid"))
    monkeypatch.setattr(job, "finetune", lambda c, w: {"config": c, "workdir": w})
    result = selection.run_finetune(config, str(tmp_path))
    assert result == {"config": config, "workdir": str(tmp_path)}
    assert not selection.is_sweep(config)
    assert selection.is_sweep(micro_config("csv", "sweep.learning_rate=1e-3,2e-3"))
    assert selection.is_sweep(micro_config("csv", "seeds=1,2"))


def test_old_grid_spellings_become_the_sweep_with_one_warning_each(capsys):
    config = micro_config("csv", "learning_rates=1e-3,2e-3", "num_train_epochs=1,2",
                          "global_batch_size=8,16", "learning_rates=1e-3,3e-3")
    assert dict(config.sweep) == {"learning_rate": "(0.001, 0.003)",
                                  "num_train_epochs": "(1, 2)", "global_batch_size": "(8, 16)"}
    assert (config.learning_rate, config.num_train_epochs, config.global_batch_size) == \
        (1e-3, 1.0, 8)  # the variant's own values: a sweep leaves them alone
    assert selection.grid_of(config)["learning_rate"] == [1e-3, 3e-3]
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == [
        "bert-jax: warning: --config.learning_rates is deprecated, use "
        "--config.sweep.learning_rate",
        "bert-jax: warning: --config.num_train_epochs is deprecated, use "
        "--config.sweep.num_train_epochs",
        "bert-jax: warning: --config.global_batch_size is deprecated, use "
        "--config.sweep.global_batch_size"]


def test_ties_keep_the_earlier_setting():
    def result(acc):
        return {"task": "csv", "selection_split": "validation", "selection_metric": "accuracy",
                "validation": {"accuracy": acc}, "test": {"accuracy": 1 - acc}}
    summaries = [{"learning_rate": lr, "run_dir": f"lr{lr:g}", "best_run": f"lr{lr:g}",
                  "score": acc, "result": result(acc)}
                 for lr, acc in ((2e-5, 0.5), (3e-5, 0.8), (5e-5, 0.8))]
    summary = selection._summary(summaries, {"learning_rate": [2e-5, 3e-5, 5e-5]}, [])
    assert summary["selected"] == {"learning_rate": 3e-5} and summary["best_run"] == "lr3e-05"
    assert summary["test"] == {"accuracy": pytest.approx(0.2)}


@pytest.mark.parametrize("variant, learning_rate", [
    ("csv", 5e-5), ("sst2", 5e-5), ("conll", 1e-4), ("conll2003", 1e-4), ("squad", 3e-5),
    ("multiple_choice", 2e-5), ("conll,tiny", 1e-3)])
def test_default_learning_rates_are_the_measured_ones(variant, learning_rate):
    """docs/finetuning.md, "How the defaults were chosen" (figures in docs/results.md)."""
    assert load_config(f"{CONFIG}:{variant}").learning_rate == learning_rate
