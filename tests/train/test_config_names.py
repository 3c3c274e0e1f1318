"""One vocabulary in the configs: pretraining and fine-tuning name a shared setting alike,
and the old names (`dtype`, `init`, `pack`, `learning_rates`) still load, in an override or a
config file, with one warning line each (`run_config.RENAMED_KEYS`)."""

from __future__ import annotations

import os

import ml_collections
import pytest

from bert_jax.finetune import inference
from bert_jax.train import run_config
from bert_jax.train.config_loader import load_config
from bert_jax.train.run_config import RENAMED_KEYS

from helpers import REPO

CONFIGS = os.path.join(REPO, "configs")
PRETRAIN, FINETUNE = (os.path.join(CONFIGS, name) for name in ("pretrain.py", "finetune.py"))

# Settings both configs hold: the same key in each.
SHARED = ("model", "tokenizer", "compute_dtype", "remat_policy", "attention_impl",
          "attention_probs_dropout_prob", "rng_impl", "max_seq_length", "packing",
          "global_batch_size", "learning_rate", "optimizer", "weight_decay", "max_grad_norm",
          "on_nonfinite", "max_consecutive_nonfinite", "mesh_shape", "logical_axis_rules",
          "seed", "log_every_steps", "init_from", "teacher", "temperature", "alpha",
          "hidden_weight", "attention_weight")


def test_pretraining_and_fine_tuning_name_shared_settings_alike():
    pretrain, finetune = load_config(f"{PRETRAIN}:tiny"), load_config(f"{FINETUNE}:sst2")
    for key in SHARED:
        assert key in pretrain and key in finetune, key
    for old in RENAMED_KEYS:
        assert old not in pretrain and old not in finetune, old


def test_a_single_run_config_holds_plain_values():
    config = load_config(f"{FINETUNE}:mrpc")
    assert type(config.learning_rate) is float and type(config.num_train_epochs) is float
    assert type(config.global_batch_size) is int
    assert not any(config.sweep.values())


@pytest.mark.parametrize("path, override, new, value", [
    (FINETUNE, "dtype=bfloat16", "compute_dtype", "bfloat16"),
    (FINETUNE, "init=models/x", "init_from", "models/x"),
    (FINETUNE, "learning_rates=2e-5,3e-5", "sweep.learning_rate", "(2e-05, 3e-05)"),
    (PRETRAIN, "pack=true", "packing", True),
])
def test_an_old_key_in_an_override_sets_the_new_one_with_one_warning(
        path, override, new, value, capsys):
    old = override.partition("=")[0]
    config = load_config(path, [override, override])
    node = config
    for part in new.split("."):
        node = node[part]
    assert node == value and old not in config
    assert capsys.readouterr().err.splitlines() == [
        f"bert-jax: warning: --config.{old} is deprecated, use --config.{new}"]


def test_an_old_key_in_a_config_file_sets_the_new_one_with_one_warning(tmp_path, capsys):
    path = tmp_path / "old_finetune.py"
    path.write_text(f"import importlib.util\n"
                    f"spec = importlib.util.spec_from_file_location('base', {FINETUNE!r})\n"
                    "base = importlib.util.module_from_spec(spec)\n"
                    "spec.loader.exec_module(base)\n\n"
                    "def get_config():\n"
                    "    c = base.get_config('sst2')\n"
                    "    del c['compute_dtype']\n"
                    "    c.dtype = 'bfloat16'\n"
                    "    return c\n")
    config = load_config(str(path), ["compute_dtype=float32"])
    assert config.compute_dtype == "float32" and "dtype" not in config
    assert capsys.readouterr().err.splitlines() == [
        f"bert-jax: warning: {path}: config key 'dtype' is deprecated, use 'compute_dtype'"]


def test_a_config_saved_before_the_renames_reads_with_the_new_names(capsys):
    saved = {"task": "sst2", "dtype": "bfloat16", "init": "models/x", "learning_rates": "",
             "logical_axis_rules": [["batch", ["data", "fsdp"]]]}
    config = inference.saved_config({"config": saved})
    assert (config.compute_dtype, config.init_from, config.sweep.learning_rate) == \
        ("bfloat16", "models/x", "")
    assert isinstance(config.sweep, ml_collections.ConfigDict)
    assert capsys.readouterr().err == ""  # not the user's spelling: nothing to warn about


def test_a_saved_config_drops_keys_the_schema_no_longer_has():
    """A model fine-tuned by an older version, with a key since dropped, still serves as a
    distillation teacher: its saved config passes the schema check."""
    saved = {"task": "sst2", "a_key_since_dropped": 3,
             "logical_axis_rules": [["batch", ["data", "fsdp"]]]}
    config = inference.saved_config({"config": saved})
    assert "a_key_since_dropped" not in config
    run_config.check(config, run_config.FINETUNE)
