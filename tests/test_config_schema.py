"""The config schemas (bert_jax/config_schema.py): each key declared once, the recipes built
from it, the resume policy derived from it, and loaded configs checked against it."""

import pytest

from bert_jax import checkpoint, config_schema
from bert_jax.config_loader import load_config
from bert_jax.errors import UserError

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
    "temperature", "alpha"})


def test_the_resume_policy_is_the_schemas():
    assert checkpoint.CHANGEABLE_KEYS == _HAND_WRITTEN


@pytest.mark.parametrize("schema", [config_schema.PRETRAIN, config_schema.FINETUNE])
def test_each_key_is_declared_once_with_a_default_that_passes_its_own_checks(schema):
    names = [k.name for k in schema]
    assert len(names) == len(set(names))
    config_schema.check(config_schema.base_config(schema), schema)
    assert all(k.help and k.group for k in schema)


@pytest.mark.parametrize("spec", ["pretrain.py:tiny", "pretrain.py:large,faithful",
                                  "pretrain.py:modernbert_base", "finetune.py:squad,tiny",
                                  "finetune.py:multiple_choice", "finetune.py:conll"])
def test_every_recipe_sets_exactly_the_schemas_keys(spec):
    config = load_config(spec)
    family = config_schema.SCHEMAS[spec.split(".")[0]]
    assert sorted(config.keys()) == sorted(k.name for k in family)
