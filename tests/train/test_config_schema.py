"""The config schemas (bert_jax/run_config.py): each key declared once, the recipes built
from it, the resume policy derived from it, and loaded configs checked against it."""

import pytest

from bert_jax.data.options import INPUT_PIPELINES
from bert_jax.errors import UserError
from bert_jax.train import checkpoint, run_config
from bert_jax.train.config_loader import load_config

# checkpoint.CHANGEABLE_KEYS as it was written by hand before the schema.
_HAND_WRITTEN = frozenset({
    "num_train_steps", "warmup_steps", "learning_rate", "allow_zero_learning_rate",
    "weight_decay", "max_grad_norm", "global_batch_size", "grad_accum_steps",
    "compute_dtype", "remat_policy", "mesh_shape", "dcn_mesh_shape", "logical_axis_rules",
    "log_every_steps", "eval_every_steps", "eval_steps", "checkpoint_every_steps",
    "keep_checkpoints", "on_nonfinite", "max_consecutive_nonfinite", "resume_from",
    "init_from", "partial_restore", "start_fresh", "model.dtype", "model.remat_policy",
    "model.fp8", "attention_impl", "attention_probs_dropout_prob", "hidden_dropout_prob",
    "model.attention_impl", "model.attention_probs_dropout_prob", "model.hidden_dropout_prob",
    "temperature", "alpha", "input_threads", "input_workers"})


def test_the_resume_policy_is_the_schemas():
    assert checkpoint.CHANGEABLE_KEYS == _HAND_WRITTEN


def test_the_input_pipelines_are_the_data_packages():
    [key] = [k for k in run_config.PRETRAIN if k.name == "input_pipeline"]
    assert key.choices == INPUT_PIPELINES


@pytest.mark.parametrize("schema", [run_config.PRETRAIN, run_config.FINETUNE])
def test_each_key_is_declared_once_with_a_default_that_passes_its_own_checks(schema):
    names = [k.name for k in schema]
    assert len(names) == len(set(names))
    run_config.check(run_config.base_config(schema), schema)
    assert all(k.help and k.group for k in schema)


@pytest.mark.parametrize("spec", ["pretrain.py:tiny", "pretrain.py:large,faithful",
                                  "pretrain.py:modernbert_base", "finetune.py:squad,tiny",
                                  "finetune.py:multiple_choice", "finetune.py:conll"])
def test_every_recipe_sets_exactly_the_schemas_keys(spec):
    config = load_config(spec)
    family = run_config.SCHEMAS[spec.split(".")[0]]
    assert sorted(config.keys()) == sorted(k.name for k in family)


def _copied_recipe(tmp_path, body: str) -> str:
    """A user's config file: the tiny recipe plus `body`, as get_config's last lines."""
    path = tmp_path / "my_pretrain.py"
    path.write_text("from bert_jax.train.run_config import PRETRAIN, base_config\n\n"
                    "def get_config():\n    c = base_config(PRETRAIN)\n    c.model = 'tiny'\n"
                    + "".join(f"    {line}\n" for line in body.splitlines())
                    + "    return c\n")
    return str(path)


@pytest.mark.parametrize("body, message", [
    ("c.num_train_step = 5", "unknown config key 'num_train_step'; did you mean num_train_steps?"),
    ("c.masked_lm_prob = 1.5", "masked_lm_prob must be between 0 and 1, got 1.5"),
    ("c.warmup_steps = -1", "warmup_steps must be an integer >= 0, got -1"),
    ("c.optimizer = 'sgd'", "optimizer must be one of adamw, lamb; got 'sgd'"),
    ("c.packing = None", "config key 'packing' expects bool, got NoneType None"),
    ("c.packing = 'yes'", "my_pretrain.py:6: TypeError: Could not override field 'packing'"),
    ("c.mesh_shape.pipeline = 2", "unknown config key 'mesh_shape.pipeline'"),
    ("c.mesh_shape.fsdp = None", "config key 'mesh_shape.fsdp' expects int, got NoneType None"),
])
def test_a_config_file_is_checked_at_load_in_one_line_naming_the_key(tmp_path, body, message):
    with pytest.raises(UserError) as e:
        load_config(_copied_recipe(tmp_path, body), command="pretrain")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_an_override_out_of_range_is_refused_at_load():
    with pytest.raises(UserError, match="eval_steps must be an integer >= 1, got 0"):
        load_config("pretrain.py:tiny", ["eval_steps=0"])
    with pytest.raises(UserError, match="alpha must be between 0 and 1, got -1.0"):
        load_config("finetune.py:spam,tiny", ["alpha=-1"])


def test_a_config_copied_before_a_key_existed_gets_its_default(tmp_path):
    path = _copied_recipe(tmp_path, "del c['max_consecutive_nonfinite']\ndel c['lr_schedule']")
    config = load_config(path, ["lr_schedule=wsd"], command="pretrain")
    assert config.max_consecutive_nonfinite == 5 and config.lr_schedule == "wsd"


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_help_config_prints_every_key_and_exits_0(command, capsys):
    from bert_jax import cli
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help_config"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for key in run_config.SCHEMAS[command]:
        assert f"\n  {key.name} (" in out
    assert "learning_rate (float) = " in out and "; resume may change" in out
