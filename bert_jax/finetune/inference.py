"""Running a fine-tuned model: the jitted eval step over the device mesh, outputs per
feature, and `load_finetuned`, which rebuilds task, model and parameters from a
fine-tuning workdir's best model (what `bert-jax evaluate` and `predict` use).
The training loop (`trainer`) evaluates with the same functions.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax import pretrained, sharding
from bert_jax.config import check_inputs_fit
from bert_jax.config_loader import load_config, rename_keys
from bert_jax.finetune import packing, task_base, tasks
from bert_jax.tokenization import load_tokenizer

EVALUATE_RESULTS_FILE = "evaluate_results.json"  # written by `bert-jax evaluate`


def predict_step(params, batch, *, model, task, rules):
    """The task's outputs of one batch in eval mode, which its predictions and metrics
    read."""
    with nn.logical_axis_rules(rules):
        outputs = model.apply({"params": params}, **task.model_inputs(batch), deterministic=True)
    return task.eval_outputs(outputs, batch)


def make_eval_fn(model, task, rules, param_shardings, mesh):
    """The jitted eval step; its outputs are replicated so that every process can read
    all of them."""
    return jax.jit(functools.partial(predict_step, model=model, task=task, rules=rules),
                   in_shardings=(param_shardings, sharding.batch_sharding(mesh, rules)),
                   out_shardings=NamedSharding(mesh, P()))


def predict_features(task, params, features, eval_fn, config, mesh) -> list[dict]:
    """Runs the eval step over `features`: one dict of numpy outputs per feature."""
    rules = config.logical_axis_rules
    batch_size = round_up(config.eval_batch_size, sharding.batch_size_multiple(mesh, rules))
    outputs: list[dict | None] = [None] * len(features)
    for batch in packing.padded_batches(features, batch_size, config.max_seq_length,
                                        task.sequence_keys, bucketing=config.length_bucketing):
        result = jax.device_get(eval_fn(params, sharding.shard_full_batch(batch, mesh, rules)))
        for row in np.flatnonzero(batch["example_weights"]):
            outputs[int(batch["feature_index"][row])] = {k: v[row] for k, v in result.items()}
    return outputs


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclasses.dataclass
class Finetuned:
    """A fine-tuned model ready to run: what `evaluate` and `predict` need."""

    task: task_base.Task
    tokenizer: Any
    config: ml_collections.ConfigDict
    params: Any
    eval_fn: Any
    mesh: jax.sharding.Mesh

    def outputs(self, features: list[dict]) -> list[dict]:
        with jax.set_mesh(self.mesh):
            return predict_features(self.task, self.params, features, self.eval_fn,
                                    self.config, self.mesh)

    def predict_examples(self, examples: list[dict]) -> list[dict]:
        features = self.task.featurize(examples, self.tokenizer, self.config.max_seq_length,
                                       training=False)
        return self.task.predict(examples, features, self.outputs(features))

    def predict(self, inputs: list) -> list[dict]:
        """One record per input, as `bert-jax predict` writes them. Inputs: texts or
        (text, text_pair) tuples for classification and regression, raw texts (split
        as character-level CoNLL data: each CJK character a word) or word lists for
        tagging, {'question', 'context'} dicts for SQuAD."""
        return self.predict_examples(self.task.examples_from_inputs(list(inputs)))


def place_model_params(pre: pretrained.Pretrained, model: nn.Module, mesh, rules):
    """A loaded model's parameters placed on `mesh` as `model` partitions them:
    (params, their shardings)."""
    dummy = jnp.ones((1, 8), jnp.int32)
    boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), dummy, dummy, dummy)["params"])
    shardings = sharding.logical_to_sharding(nn.get_partition_spec(boxed), mesh, rules)
    params = pretrained.init_params(nn.unbox(boxed), pre.params, shardings,
                                    source=pre.tokenizer_dir)
    return params, shardings


def recipe_defaults(task: str) -> ml_collections.ConfigDict:
    """configs/finetune.py's config for `task`: every fine-tuning key at its default."""
    return load_config(f"finetune.py:{task}")


def saved_config(task_spec: dict) -> ml_collections.ConfigDict:
    """The fine-tuning config saved with a model (`task_spec["config"]`); keys added to
    the recipe since it was saved take their defaults (`recipe_defaults`)."""
    config = rename_keys(ml_collections.ConfigDict(task_spec["config"]))  # older key names
    defaults = recipe_defaults(config.task)
    with config.ignore_type():
        for key in set(defaults.keys()) - set(config.keys()):
            config[key] = defaults[key]
    # JSON turned the rules' tuples into lists.
    rules = tuple((name, tuple(axes) if isinstance(axes, list) else axes)
                  for name, axes in config.logical_axis_rules)
    with config.ignore_type():
        config.logical_axis_rules = rules
    return config


def load_finetuned(workdir: str, overrides: dict | None = None) -> Finetuned:
    """Rebuilds task, model and parameters from WORKDIR/best, or a fine-tuned model
    directory itself (config keys overridable)."""
    pre = pretrained.load(pretrained.resolve_model_dir(workdir))
    if not pre.task or "config" not in pre.task:
        raise ValueError(f"{workdir}: the saved model has no fine-tuning task description")
    config = saved_config(pre.task)
    for key, value in (overrides or {}).items():
        config[key] = value
    task = tasks.from_spec(pre.task, config)
    rules = config.logical_axis_rules
    mesh = sharding.config_mesh(config)
    model = task.model(pre.config)
    params, shardings = place_model_params(pre, model, mesh, rules)
    eval_fn = make_eval_fn(model, task, rules, shardings, mesh)
    tokenizer = load_tokenizer(pre.tokenizer_dir)
    check_inputs_fit(pre.config, pre.tokenizer_dir, vocab_size=tokenizer.vocab_size)
    return Finetuned(task, tokenizer, config, params, eval_fn, mesh)
