"""What fine-tuning minimises, and the train and eval steps compiled for a task's data.

`TaskObjective`: the task loss, or distillation's, bound to a task's model as a
`train.objective.Objective`. The steps: `train_step.train_step` of the objective, counting the
examples each batch holds, and the task's predictions."""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from bert_jax.finetune import task_data
from bert_jax.finetune.inference import predict_step
from bert_jax.train import objective as objectives
from bert_jax.train import train_step
from bert_jax.train.sharding import Partitioner


def task_loss(params, batch, extra, dropout_key, *, model, task, rules):
    """Fine-tuning's loss terms: the task's on the model's training outputs (`extra` unused).

    {name: (weighted sum, weight)}, the loss as "loss"."""
    with nn.logical_axis_rules(rules):
        outputs = model.apply({"params": params}, **task.model_inputs(batch),
                              deterministic=False, rngs={"dropout": dropout_key})
    return task.loss(outputs, batch)


@dataclasses.dataclass(frozen=True)
class TaskObjective:
    """What the train step minimises: a loss, weighed by `coefficients`, and an untrained `extra`.

    `loss(params, batch, extra, dropout_key, *, model, task, rules)` ->
    {name: (weighted sum, weight)}, of whose means `coefficients` weigh the ones trained on, and
    `extra`, an input of every step that is not trained (a distillation teacher's parameters),
    placed with `extra_shardings`. `describe` names it in the run's log. `wrap_model`
    (task model -> model) adds parameters that the objective trains with the model, at the top level
    of its tree (a TinyBERT projection), and `unsaved` names those left out of the saved model.

    `bound(model, task, rules)` is the `train.objective.Objective` of a task's model:
    evaluation is the task's predictions (`inference.predict_step`), which its metric
    reads; checkpoints save nothing beside the state."""

    loss: Any = task_loss
    coefficients: dict = dataclasses.field(default_factory=lambda: {"loss": 1.0})
    extra: Any = None
    extra_shardings: Any = None
    describe: str = "fine-tuning"
    wrap_model: Any = None
    unsaved: tuple = ()
    model: Any = None  # the task's model, task and axis rules, once `bound`
    task: Any = None
    rules: tuple = ()

    def bound(self, model, task, rules: tuple) -> "TaskObjective":
        return dataclasses.replace(self, model=model, task=task, rules=rules)

    @property
    def eval_coefficients(self) -> dict[str, float]:
        return {}  # the eval step gives predictions, not sums

    def loss_terms(self, params, batch: dict, extra, dropout_key) -> dict:
        return self.loss(params, batch, extra, dropout_key, model=self.model, task=self.task,
                         rules=self.rules)

    def eval_step(self, params, batch: dict) -> dict:
        return predict_step(params, batch, model=self.model, task=self.task, rules=self.rules)

    def models_beside(self, params) -> dict:
        return {}


def compiled_steps(data: task_data.TaskData, objective: TaskObjective, tx, shardings,
                   partitioner: Partitioner, frozen: str = "", grad_accum_steps: int = 1):
    """(train step, eval step) of `data`'s model and `objective`.

    Jitted once per set of `frozen` patterns and accumulation count: later runs pass states whose
    optimizer hyperparameters differ but whose structure and shardings are the same."""
    key = (frozen, grad_accum_steps)
    if key not in data.compiled:
        bound = objective.bound(data.model, data.task, partitioner.rules)
        step_fn = train_step.jit_train_step(bound, tx, shardings, partitioner,
                                            grad_accum_steps=grad_accum_steps,
                                            counts=count_examples)
        data.compiled[key] = (step_fn, objectives.jit_eval_step(bound, shardings.params,
                                                                partitioner))
    return data.compiled[key]


def count_examples(batch: dict) -> dict:
    """The examples a training batch holds (padding rows and slots weigh 0)."""
    return {"examples": jnp.sum(batch["example_weights"])}
