"""What fine-tuning minimises (`Objective`: the task loss, or distillation's), and the
train and eval steps compiled for a task's data: `train_step.train_step` of the objective's
loss, counting the examples each batch holds."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from bert_jax.finetune import task_data
from bert_jax.finetune.inference import make_eval_fn
from bert_jax.train import train_step
from bert_jax.train.sharding import Partitioner


def task_loss(params, batch, extra, dropout_key, *, model, task, rules):
    """Fine-tuning's loss terms: the task's on the model's training outputs (`extra`
    unused). {name: (weighted sum, weight)}, the loss as "loss"."""
    with nn.logical_axis_rules(rules):
        outputs = model.apply({"params": params}, **task.model_inputs(batch),
                              deterministic=False, rngs={"dropout": dropout_key})
    return task.loss(outputs, batch)


@dataclasses.dataclass
class Objective:
    """What the train step minimises: `loss(params, batch, extra, dropout_key, *, model,
    task, rules)` -> {name: (weighted sum, weight)}, of whose means `coefficients`
    weigh the ones trained on, and `extra`, an input of every step that is not
    trained (a distillation teacher's parameters), placed with `extra_shardings`.
    `describe` names it in the run's log. `wrap_model` (task model -> model) adds
    parameters that the objective trains with the model, at the top level of its tree
    (a TinyBERT projection), and `unsaved` names those left out of the saved model."""

    loss: Any = task_loss
    coefficients: dict = dataclasses.field(default_factory=lambda: {"loss": 1.0})
    extra: Any = None
    extra_shardings: Any = None
    describe: str = "fine-tuning"
    wrap_model: Any = None
    unsaved: tuple = ()


def compiled_steps(data: task_data.TaskData, objective: Objective, tx, shardings,
                   partitioner: Partitioner, frozen: str = "", grad_accum_steps: int = 1):
    """(train step, eval step) of `data`'s model and `objective`, jitted once per set of
    `frozen` patterns and accumulation count: later runs pass states whose optimizer
    hyperparameters differ but whose structure and shardings are the same."""
    key = (frozen, grad_accum_steps)
    if key not in data.compiled:
        loss_fn = functools.partial(objective.loss, model=data.model, task=data.task,
                                    rules=partitioner.rules)
        step_fn = train_step.jit_train_step(
            loss_fn, objective.coefficients, tx, shardings, partitioner,
            grad_accum_steps=grad_accum_steps, extra_shardings=objective.extra_shardings,
            counts=count_examples)
        data.compiled[key] = (step_fn, make_eval_fn(data.model, data.task, partitioner,
                                                    shardings.params))
    return data.compiled[key]


def count_examples(batch: dict) -> dict:
    """The examples a training batch holds (padding rows and slots weigh 0)."""
    return {"examples": jnp.sum(batch["example_weights"])}
