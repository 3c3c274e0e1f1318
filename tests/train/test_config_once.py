"""Every run config comes from one constructor (`config_loader.build_config`), which checks
it against its schema once: a config file's, the one saved with a fine-tuned model, a
distillation's. The jobs' set-up trusts that check (`run_config.require_built`) instead of
running it again; a grid's runs are checked by their new values alone; a pretraining run
makes its data options once (`Setup.data_options`)."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

from bert_jax.data.options import CONFIG_FIELDS, DataOptions
from bert_jax.errors import UserError
from bert_jax.finetune import distill, inference, job, schedule, selection
from bert_jax.pretrain import setup as pretrain_setup
from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.tokenization import DEFAULT_VOCAB
from bert_jax.train import run_config
from bert_jax.train.config_loader import load_config

from helpers.finetune import MICRO_MODEL, NEGATIVE, POSITIVE, micro_config, write_tsv
from helpers.pretrain import SMALL_MODEL


@pytest.fixture
def checked(monkeypatch):
    """Every config the schema check runs on, in order."""
    seen, check = [], run_config.check

    def counting(config, schema):
        seen.append(config)
        check(config, schema)
    monkeypatch.setattr(run_config, "check", counting)
    return seen


@pytest.fixture
def csv(tmp_path):
    """A micro fine-tuning config of the csv task over a few labeled lines."""
    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    files = [f"train_file={write_tsv(tmp_path / 'train.tsv', rows)}",
             f"validation_file={write_tsv(tmp_path / 'dev.tsv', rows)}",
             "text_column=sentence", "label_column=sentiment"]
    return lambda *overrides: micro_config("csv", *files, *overrides)


def times(seen: list, config) -> int:
    return sum(c is config for c in seen)


def saved(config) -> dict:
    """A task spec as a fine-tuned model saves it: its config through JSON."""
    return {"name": config.task, "config": json.loads(json.dumps(config.to_dict()))}


def test_a_fine_tuning_config_is_checked_once(checked, csv):
    config = csv()
    session = job.Finetuning(config)
    schedule.check_finetuning_config(config)
    assert times(checked, config) == 1
    # The config saved with a model (what evaluate, predict and a teacher read) is built
    # as today's and checked once; the recipe that fills its missing keys is not checked.
    restored = inference.saved_config(saved(config))
    job.Finetuning(restored)
    assert times(checked, restored) == 1 and len(checked) == 2
    assert restored.to_dict() == session.config.to_dict()


def test_a_distillation_config_is_checked_once(checked, csv):
    teacher = types.SimpleNamespace(task=saved(csv()), tokenizer_dir=DEFAULT_VOCAB)
    checked.clear()
    config = distill.distill_config(teacher, "tiny", [f"model={MICRO_MODEL}",
                                                      "num_train_epochs=1"])
    distill.check_distillation_config(config)
    job.Finetuning(config)
    assert times(checked, config) == 1
    teacher_config = inference.saved_config(teacher.task)  # as `distill.distill` reads it
    assert times(checked, teacher_config) == 1 and len(checked) == 2
    assert (config.teacher, config.tokenizer, config.num_train_epochs) == \
        (DEFAULT_VOCAB, DEFAULT_VOCAB, 1.0)


def test_a_grid_run_is_checked_by_its_new_values_alone(checked):
    config = micro_config("csv", "sweep.learning_rate=1e-3,2e-3", "seeds=1,2")
    grid = selection.grid_of(config)
    one = selection.setting_config(config, {key: values[-1] for key, values in grid.items()})
    assert checked == [config] and run_config.built_for(one) == "finetune"
    assert (one.learning_rate, one.seeds, one.sweep.learning_rate) == (2e-3, "", "")
    schedule.check_finetuning_config(one)
    with pytest.raises(UserError, match="learning_rate must be >= 0.0, got -0.001"):
        selection.setting_config(config, {"learning_rate": -1e-3})


def test_a_config_made_by_hand_is_refused_by_the_jobs():
    with pytest.raises(TypeError, match="must come from bert_jax.train.config_loader"):
        schedule.check_finetuning_config(run_config.base_config(run_config.FINETUNE))
    with pytest.raises(UserError, match="a `bert-jax finetune` config was given to a step "
                                        "of `bert-jax pretrain`"):
        pretrain_setup.Setup.build(micro_config("csv"), 512)


def test_a_saved_config_gets_every_field_of_a_dict_key():
    """A config saved with the grid's old spelling holds one field of `sweep`: the others
    take their defaults."""
    spec = saved(micro_config("csv"))
    del spec["config"]["sweep"]
    spec["config"]["learning_rates"] = ""
    config = inference.saved_config(spec)
    assert dict(config.sweep) == dict.fromkeys(run_config.SWEEP_KEYS, "")


def test_data_options_take_every_setting_a_pretraining_config_has():
    fields = {f.name for f in dataclasses.fields(DataOptions)}
    assert set(CONFIG_FIELDS) == fields & {key.name for key in run_config.PRETRAIN}


@pytest.fixture
def made(monkeypatch):
    """Every config a DataOptions is made from, in order."""
    seen, from_config = [], DataOptions.from_config.__func__

    def counting(cls, config, **pipeline):
        seen.append(config)
        return from_config(cls, config, **pipeline)
    monkeypatch.setattr(DataOptions, "from_config", classmethod(counting))
    return seen


def test_a_pretraining_setup_checks_its_config_and_makes_its_data_options_once(checked,
                                                                                made):
    config = load_config("pretrain.py:tiny", [f"model={SMALL_MODEL}", "max_seq_length=32",
                                              "max_predictions_per_seq=5"])
    setup = pretrain_setup.Setup.build(config, 512)
    assert setup.abstract_batch()["masked_lm_ids"].shape == (config.global_batch_size, 5)
    assert checked == [config] and made == [config]
    assert setup.data_options == DataOptions.from_config(config)


@pytest.mark.slow
def test_a_pretraining_run_checks_its_config_and_makes_its_data_options_once(
        checked, made, tmp_path, text_corpus):  # noqa: F811
    config = load_config("pretrain.py:tiny", [
        f"model={SMALL_MODEL}", f"input_files={text_corpus!r}", "max_seq_length=32",
        "max_predictions_per_seq=5", "global_batch_size=8", "num_train_steps=1",
        "warmup_steps=0", "eval_every_steps=1", "eval_steps=1", "eval_fraction=0.1",
        "checkpoint_every_steps=1"])
    train_and_evaluate(config, str(tmp_path / "run"))
    assert checked == [config] and made == [config]
