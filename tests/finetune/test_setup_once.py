"""A fine-tune's setup does each piece of work once and rewrites no config it is given:
the task built, the training split read and featurized, the workdir checked once;
max_seq_length='auto' resolved into the config the run records, not into the caller's."""

from __future__ import annotations

import ast
import collections
import json
import os

import pytest

from bert_jax.finetune import cli, job, tasks
from bert_jax.finetune.tasks import csv_task
from bert_jax.host import outputs

from helpers import REPO, source
from helpers.finetune import MICRO_MODEL, micro_config

TEXTS = [" ".join(["good"] * n) for n in range(1, 21)]  # 3 .. 22 tokens with [CLS], [SEP]
# The constructor of run configs (config_loader.build_config) is the one place that sets
# a given config's keys.
CONFIG_CONSTRUCTOR = {os.path.join("bert_jax", "train", name)
                      for name in ("config_loader.py", "run_config.py")}


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.tsv"
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(TEXTS)))
    return [f"train_file={path}", f"validation_file={path}", f"test_file={path}",
            "text_column=text", "label_column=label", "num_train_epochs=1",
            "max_seq_length=auto"]


@pytest.fixture
def counted(monkeypatch):
    """Counts of task builds, reads per split, featurizations per (examples, length,
    training) and workdir checks."""
    counts = collections.Counter()
    get_task, load, featurize = tasks.get_task, csv_task.CsvTask.load, \
        csv_task.CsvTask.featurize
    check_workdir = outputs.check_workdir

    def counting_get_task(config):
        counts["task built"] += 1
        return get_task(config)

    def counting_load(self, split):
        counts[f"read {split}"] += 1
        return load(self, split)

    def counting_featurize(self, examples, tokenizer, max_seq_length, *, training):
        counts[("featurized", len(examples), max_seq_length, training)] += 1
        return featurize(self, examples, tokenizer, max_seq_length, training=training)

    def counting_check_workdir(workdir, kind, inputs=None):
        checked = check_workdir(workdir, kind, inputs)
        counts["workdir checked"] += checked is not workdir
        return checked

    monkeypatch.setattr(tasks, "get_task", counting_get_task)
    monkeypatch.setattr(csv_task.CsvTask, "load", counting_load)
    monkeypatch.setattr(csv_task.CsvTask, "featurize", counting_featurize)
    monkeypatch.setattr(outputs, "check_workdir", counting_check_workdir)
    return counts


@pytest.mark.long
def test_a_fine_tune_builds_reads_featurizes_and_checks_once(tmp_path, data, counted):
    workdir = tmp_path / "run"
    argv = ["--config", os.path.join(REPO, "configs", "finetune.py") + ":csv,tiny",
            "--workdir", str(workdir)]
    overrides = [f"model={MICRO_MODEL}", "global_batch_size=8", "eval_batch_size=16",
                 "log_every_steps=1000", *data]
    assert cli.finetune_main(argv + [f"--config.{o}" for o in overrides]) == 0
    # 19 of the 20 examples (95%) have at most 21 tokens: auto is the next multiple of 8.
    assert counted == {"task built": 1, "read train": 1, "read validation": 1,
                       "read test": 1, "workdir checked": 1,
                       ("featurized", 20, 24, True): 1,  # the training features
                       ("featurized", 20, 24, False): 2,  # validation, test
                       # the training split's lengths before truncation, which auto needs
                       ("featurized", 20, 1 << 30, False): 1}
    saved = json.loads((workdir / "best" / "bert_jax.json").read_text())
    assert saved["task"]["config"]["max_seq_length"] == 24
    assert json.loads((workdir / "eval_results.json").read_text())["max_seq_length"] == 24


def test_auto_is_resolved_into_the_sessions_config_not_the_callers(data):
    config = micro_config("csv", *data)
    session = job.Finetuning(config)
    assert config.max_seq_length == "auto"  # what the caller built stays as built
    assert session.config.max_seq_length == session.length_coverage["max_seq_length"] == 24
    assert session.length_coverage["auto"]
    assert session.resolved(config).max_seq_length == 24  # a grid's copy of it
    fixed = micro_config("csv", *[o for o in data if not o.startswith("max_seq_length")])
    assert job.Finetuning(fixed).config is fixed  # nothing to resolve: no copy


def _mutations_of_given_configs(tree: ast.AST):
    """(function, line) of every assignment to a key of a `config` parameter, and every
    `config.ignore_type()`/`unlock()` on one, in `tree`."""
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        given = {a.arg for a in function.args.args + function.args.kwonlyargs
                 if "config" in a.arg}
        for node in ast.walk(function):
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, ast.AugAssign) else [])
            changed = [t.value for t in targets if isinstance(t, (ast.Attribute, ast.Subscript))]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("ignore_type", "unlock"):
                changed.append(node.func.value)
            for base in changed:
                if isinstance(base, ast.Name) and base.id in given:
                    yield getattr(function, "name", "<lambda>"), node.lineno


def test_no_function_below_the_config_constructor_rewrites_a_config_it_is_given():
    found = []
    for folder, _, names in os.walk(os.path.join(REPO, "bert_jax")):
        for name in names:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, REPO)
            if not name.endswith(".py") or relative in CONFIG_CONSTRUCTOR:
                continue
            tree = source.parse(path)
            found += [f"{relative}:{line} {function}"
                      for function, line in _mutations_of_given_configs(tree)]
    assert found == []
    assert not hasattr(job.task_data, "train_length_coverage")  # the query that resolved
