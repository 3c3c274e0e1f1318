"""Running a fine-tuned model: the jitted eval step over the device mesh, outputs per feature.

And `load_finetuned`, which rebuilds task, model and parameters from a fine-tuning workdir's best
model (what `bert-jax evaluate` and `predict` use). The training loop (`job`) evaluates with the
same functions.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from typing import Any, Callable, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune import files, packing, tasks
from bert_jax.finetune.tasks import base as task_base
from bert_jax.host import paths
from bert_jax.host.folders import FINETUNING_WORKDIR
from bert_jax.models.config import check_inputs_fit
from bert_jax.tokenization import load_tokenizer
from bert_jax.train import multihost
from bert_jax.train.config_loader import build_config, read_config
from bert_jax.train.sharding import Partitioner
from bert_jax.weights import pretrained


def predict_step(params, batch, *, model, task, rules):
    """The task's outputs of one batch in eval mode, which its predictions and metrics read."""
    with nn.logical_axis_rules(rules):
        outputs = model.apply({"params": params}, **task.model_inputs(batch), deterministic=True)
    return task.eval_outputs(outputs, batch)


def make_eval_fn(model, task, partitioner: Partitioner, param_shardings):
    """The jitted eval step.

    Its outputs are replicated so that every process can read all of them."""
    return jax.jit(functools.partial(predict_step, model=model, task=task,
                                     rules=partitioner.rules),
                   in_shardings=(param_shardings, partitioner.batch_sharding),
                   out_shardings=partitioner.replicated)


@dataclasses.dataclass(frozen=True)
class EvalBatching:
    """How features are batched for the eval step: the config keys of the same names."""

    eval_batch_size: int
    max_seq_length: int
    length_bucketing: bool

    @classmethod
    def of(cls, config) -> "EvalBatching":
        return cls(config.eval_batch_size, config.max_seq_length, config.length_bucketing)


def predict_features(task, params, features, eval_fn, batching: EvalBatching,
                     partitioner: Partitioner,
                     progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """Runs the eval step over `features`: one dict of numpy outputs per feature.

    `progress(done, total)` is called after each batch."""
    batch_size = round_up(batching.eval_batch_size, partitioner.batch_shards)
    outputs: list[dict | None] = [None] * len(features)
    done = 0
    for batch in packing.padded_batches(features, batch_size, batching.max_seq_length,
                                        task.sequence_keys,
                                        bucketing=batching.length_bucketing):
        result = jax.device_get(eval_fn(params, partitioner.shard_full_batch(batch)))
        for row in np.flatnonzero(batch["example_weights"]):
            outputs[int(batch["feature_index"][row])] = {k: v[row] for k, v in result.items()}
            done += 1
        if progress is not None:
            progress(done, len(features))
    return outputs


class Progress:
    """`progress(done, total)` for `predict_features`: a line on stderr at most every EVERY_SECONDS.

    The line reads "predict: 12,000 of 60,000 sequences (20%)"; a run shorter than that says
    nothing."""

    EVERY_SECONDS = 10.0

    def __init__(self, label: str):
        self.label, self.last = label, time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if time.monotonic() - self.last >= self.EVERY_SECONDS and done < total:
            self.last = time.monotonic()
            print(f"{self.label}: {done:,} of {total:,} sequences ({done / total:.0%})",
                  file=sys.stderr, flush=True)


def remove_outputs(workdir: str) -> None:
    """Deletes WORKDIR's test predictions and results files.

    For a run about to train: an earlier run's would pass for its own."""
    paths.rmtree(paths.join(workdir, FINETUNING_WORKDIR.predictions), missing_ok=True)
    for name in (FINETUNING_WORKDIR.results, FINETUNING_WORKDIR.evaluate_results):
        if paths.exists(paths.join(workdir, name)):
            paths.remove(paths.join(workdir, name))


def evaluate_sets(task, params, eval_sets, eval_fn, batching: EvalBatching,
                  partitioner: Partitioner) -> dict[str, dict]:
    return {split: task.evaluate(examples, features,
                                 predict_features(task, params, features, eval_fn, batching,
                                                  partitioner))
            for split, (examples, features) in eval_sets.items()}


def predict_test(task, test_sets: dict[str, list], tokenizer, params, eval_fn,
                 batching: EvalBatching, partitioner: Partitioner,
                 workdir: str) -> dict[str, Any]:
    """Predictions (and metrics, if labeled) for the test splits' examples.

    The examples are `test_sets`, {split: examples}; writes WORKDIR/predictions/SPLIT.jsonl and the
    task's submission files."""
    out = {}
    for split, examples in test_sets.items():
        features = task.featurize(examples, tokenizer, batching.max_seq_length,
                                  training=False)
        outputs = predict_features(task, params, features, eval_fn, batching, partitioner)
        records = task.predict(examples, features, outputs)
        if multihost.is_primary():
            files.write_jsonl(paths.join(workdir, FINETUNING_WORKDIR.predictions,
                                         f"{split}.jsonl"), records)
            task.write_test_predictions(records, split, workdir)
        if examples and all(task.is_labeled(ex) for ex in examples):
            out[split] = task.evaluate(examples, features, outputs)
    return out


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
    partitioner: Partitioner
    progress: Progress | None = None  # `predict` sets one: long runs say how far they are

    def outputs(self, features: list[dict]) -> list[dict]:
        with jax.set_mesh(self.partitioner.mesh):
            return predict_features(self.task, self.params, features, self.eval_fn,
                                    EvalBatching.of(self.config), self.partitioner,
                                    self.progress)

    def predict_examples(self, examples: list[dict]) -> list[dict]:
        features = self.task.featurize(examples, self.tokenizer, self.config.max_seq_length,
                                       training=False)
        return self.task.predict(examples, features, self.outputs(features))

    def predict(self, inputs: list) -> list[dict]:
        """One record per input, as `bert-jax predict` writes them.

        Inputs: texts or (text, text_pair) tuples for classification and regression, raw texts
        (split as character-level CoNLL data: each CJK character a word) or word lists for tagging,
        {'question', 'context'} dicts for SQuAD."""
        return self.predict_examples(self.task.examples_from_inputs(list(inputs)))


def place_model_params(pre: pretrained.Pretrained, model: nn.Module,
                       partitioner: Partitioner):
    """A loaded model's parameters placed by `partitioner` as `model` partitions them.

    Returns (params, their shardings)."""
    dummy = jnp.ones((1, 8), jnp.int32)
    boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), dummy, dummy, dummy)["params"])
    shardings = partitioner.shardings_of(nn.get_partition_spec(boxed))
    params = pretrained.init_params(nn.unbox(boxed), pre.params, shardings,
                                    source=pre.tokenizer_dir)
    return params, shardings


def recipe_defaults(task: str) -> ml_collections.ConfigDict:
    """configs/finetune.py's config for `task` as the recipe writes it.

    Unchecked: it only supplies values."""
    return read_config(f"finetune.py:{task}")


def saved_config(task_spec: dict, overrides: Sequence[str] = (),
                 changes: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
    """The fine-tuning config saved with a model (`task_spec["config"]`), built as today's.

    It is built by `config_loader.build_config`: old key names renamed, keys dropped since dropped,
    keys added since at the values of its run or else of the task's recipe (`recipe_defaults`); with
    `changes` set and `KEY=VALUE` `overrides` applied."""
    values = task_spec["config"]
    return build_config("finetune", values, overrides, saved=True, changes=changes,
                        defaults=recipe_defaults(values["task"]))


def load_finetuned(workdir: str, overrides: dict | None = None) -> Finetuned:
    """Rebuilds task, model and parameters from WORKDIR/best.

    Or from a fine-tuned model directory itself (config keys overridable)."""
    pre = pretrained.load(workdir)
    if not pre.task or "config" not in pre.task:
        raise UserError(f"{workdir}: the saved model has no fine-tuning task description")
    config = saved_config(pre.task)
    for key, value in (overrides or {}).items():
        config[key] = value
    task = tasks.from_spec(pre.task, config)
    task.loaded_from = workdir  # its messages name the model the user gave
    partitioner = Partitioner.from_config(config)
    model = task.model(pre.config)
    params, shardings = place_model_params(pre, model, partitioner)
    eval_fn = make_eval_fn(model, task, partitioner, shardings)
    tokenizer = load_tokenizer(pre.tokenizer_dir)
    check_inputs_fit(pre.config, pre.tokenizer_dir, vocab_size=tokenizer.vocab_size)
    return Finetuned(task, tokenizer, config, params, eval_fn, partitioner)
