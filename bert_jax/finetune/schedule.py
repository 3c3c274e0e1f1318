"""A fine-tuning run's schedule: its settings checked, steps and epochs, optimizer and batches.

The optimizer comes with its learning-rate schedule (and its frozen form while `freeze` holds), and
the training batches epoch after epoch, from any step on (a resumed run gets the batches an
uninterrupted one would)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.errors import UserError, check_learning_rate
from bert_jax.finetune import packing
from bert_jax.finetune.inference import round_up
from bert_jax.finetune.objective import compiled_steps
from bert_jax.train import optim, run_config
from bert_jax.train.train_state import StatePlan

ZERO_LEARNING_RATE = ("; a linear probe trains the head alone: --config.freeze='bert/*' "
                      "with a learning rate > 0; to score a fine-tuned model without "
                      "training: bert-jax evaluate --model DIR")


def check_finetuning_config(config) -> None:
    """The checks of a fine-tuning config that need no data beyond its schema's.

    The schema's ran when it was built (`run_config.require_built`). Raises UserError naming the
    key. The mesh's rules on batch sizes are `Batching.rows_multiple`'s."""
    run_config.require_built(config, "finetune")
    check_learning_rate(config.learning_rate, zero_hint=ZERO_LEARNING_RATE)
    if config.global_batch_size % config.grad_accum_steps:
        raise UserError(f"global_batch_size {config.global_batch_size} is not a multiple of "
                        f"grad_accum_steps {config.grad_accum_steps}")


def _of_config(cls, config):
    """An options object of `cls` with the values of the config keys its fields name."""
    return cls(**{field.name: config[field.name] for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class Batching:
    """How a run's training batches are made: the config keys of the same names."""

    global_batch_size: int
    grad_accum_steps: int
    max_seq_length: int
    packing: bool
    max_examples_per_row: int
    length_bucketing: bool

    @classmethod
    def of(cls, config) -> "Batching":
        return _of_config(cls, config)

    def rows_multiple(self, batch_shards: int) -> int:
        """The multiple of rows every batch has.

        `batch_shards` for each accumulated micro-batch (each spans the shards). Raises UserError
        when global_batch_size is not one: it is not rounded up, so what a run records is what
        ran."""
        multiple = batch_shards * self.grad_accum_steps
        if self.global_batch_size % multiple:
            raise UserError(f"global_batch_size {self.global_batch_size} is not a multiple "
                            f"of grad_accum_steps {self.grad_accum_steps} x {batch_shards} "
                            f"batch shards: set --config.global_batch_size="
                            f"{round_up(self.global_batch_size, multiple)}")
        return multiple


@dataclasses.dataclass(frozen=True)
class Optimization:
    """What a run trains, how and for how long: the config keys of the same names."""

    num_train_epochs: float
    learning_rate: float
    warmup_proportion: float
    optimizer: str
    weight_decay: float
    max_grad_norm: float
    freeze: str
    freeze_steps: int
    freeze_epochs: float

    @classmethod
    def of(cls, config) -> "Optimization":
        return _of_config(cls, config)


@dataclasses.dataclass
class Plan:
    """A run's schedule: steps, epochs, the optimizer, learning rates and training batches.

    The optimizer comes with its frozen form, the learning rate is given at each update count, and
    the training batches are `train_batches`."""

    batching: Batching
    optimization: Optimization
    multiple: int  # the batch rows' multiple (`Batching.rows_multiple`)
    steps_per_epoch: int
    num_steps: int
    num_epochs: int
    rows_per_batch: int
    frozen_steps: int
    full_tx: Any
    tx: Any  # full_tx, or its frozen form while `freeze` holds
    schedule: Any
    init_fn: Any
    hyperparams: dict  # what the optimizer state holds (`optim.set_hyperparams`)

    @classmethod
    def of(cls, batching: Batching, optimization: Optimization, data,
           multiple: int) -> "Plan":
        rows_per_batch, opt = 0, optimization
        if batching.packing:
            per_row, rows_per_batch = packing.packed_plan(
                data.train_features, batching.max_seq_length, batching.max_examples_per_row,
                batching.global_batch_size, multiple)
            steps_per_epoch = math.ceil(len(data.train_features) / per_row / rows_per_batch)
        else:
            steps_per_epoch = math.ceil(len(data.train_features)
                                        / round_up(batching.global_batch_size, multiple))
        num_steps = max(1, int(opt.num_train_epochs * steps_per_epoch))
        hyperparams = dict(learning_rate=opt.learning_rate, num_train_steps=num_steps,
                           warmup_steps=int(opt.warmup_proportion * num_steps))
        full_tx, schedule = optim.make_optimizer(
            **hyperparams, optimizer=opt.optimizer, weight_decay=opt.weight_decay,
            max_grad_norm=opt.max_grad_norm, injected=True)
        dummy = jnp.ones((1, 8), jnp.int32)
        init_fn = lambda key: data.model.init({"params": key, "dropout": key}, dummy, dummy,
                                              dummy)["params"]
        frozen_steps = count_frozen_steps(opt, steps_per_epoch, num_steps)
        tx = full_tx
        if frozen_steps:
            shapes = nn.unbox(jax.eval_shape(init_fn, jax.random.key(0)))
            tx = optim.freeze(full_tx, optim.frozen_mask(shapes, opt.freeze))
        return cls(batching, opt, multiple, steps_per_epoch, num_steps,
                   math.ceil(opt.num_train_epochs), rows_per_batch, frozen_steps, full_tx, tx,
                   schedule, init_fn, hyperparams)

    def frozen_at(self, step: int) -> bool:
        """Whether the state after `step` steps has the frozen optimizer state.

        The unfreezing follows step `frozen_steps`, unless that is the last."""
        return bool(self.frozen_steps) and (step < self.frozen_steps
                                            or self.frozen_steps >= self.num_steps)

    def train_batches(self, task, features, epoch: int, seed: int):
        """The batches of `features` in `epoch` of a run of `seed`.

        Padded (or bucketed) rows, or packed ones."""
        batching, batch_seed = self.batching, seed * 1000 + epoch
        if batching.packing:
            return packing.packed_batches(features, self.rows_per_batch,
                                          batching.max_seq_length,
                                          batching.max_examples_per_row, task.sequence_keys,
                                          shuffle_seed=batch_seed)
        return packing.padded_batches(features, round_up(batching.global_batch_size,
                                                         self.multiple),
                                      batching.max_seq_length, task.sequence_keys,
                                      bucketing=batching.length_bucketing,
                                      shuffle_seed=batch_seed)


class EpochBatches:
    """The run's training batches, epoch after epoch (`make_epoch(epoch)`), from step `skip` on.

    A resumed run gets the batches an uninterrupted one would. `epoch` and `epoch_ended` describe
    the batch taken last."""

    def __init__(self, make_epoch, num_epochs: int, skip: int = 0):
        self._items = self._all(make_epoch, num_epochs)
        self.epoch, self.epoch_ended = 0, False
        for _ in range(skip):
            next(self)

    @staticmethod
    def _all(make_epoch, num_epochs):
        for epoch in range(num_epochs):
            batches = iter(make_epoch(epoch))
            batch = next(batches, None)
            while batch is not None:
                following = next(batches, None)
                yield epoch, batch, following is None
                batch = following

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        self.epoch, batch, self.epoch_ended = next(self._items)
        return batch


def count_frozen_steps(optimization: Optimization, steps_per_epoch: int,
                       num_steps: int) -> int:
    """For how many steps `optimization.freeze` holds.

    `freeze_steps`, `freeze_epochs` epochs, or the whole run when neither is set; 0 without
    patterns."""
    opt = optimization
    if not opt.freeze:
        return 0
    if opt.freeze_steps and opt.freeze_epochs:
        raise UserError("set freeze_steps or freeze_epochs, not both")
    if opt.freeze_epochs:
        return min(num_steps, math.ceil(opt.freeze_epochs * steps_per_epoch))
    return min(num_steps, opt.freeze_steps) if opt.freeze_steps else num_steps


def unfreeze(state, full_tx, init_fn, partitioner, rng_impl):
    """The state and its shardings for training every parameter.

    The frozen ones get fresh optimizer state, the others keep theirs."""
    shardings = StatePlan.build(init_fn, full_tx, partitioner, rng_impl).shardings
    opt_state = jax.jit(lambda params, frozen: optim.unfreeze_state(frozen, full_tx.init(params)),
                        out_shardings=shardings.opt_state)(state.params, state.opt_state)
    return state.replace(opt_state=opt_state), shardings


def unfreezer(data, plan: Plan, objective, partitioner, rng_impl: str):
    """The action that ends the hold of `plan`'s `freeze` patterns.

    Every parameter of `data`'s model trains on, with the train step of `objective` compiled for the
    full optimizer."""
    def end_freezing(loop):
        if loop.step >= loop.num_steps:
            return
        loop.state, shardings = unfreeze(
            loop.state, plan.full_tx, plan.init_fn, partitioner, rng_impl)
        loop.step_fn, _ = compiled_steps(data, objective, plan.full_tx, shardings, partitioner,
                                         "", plan.batching.grad_accum_steps)
        loop.writer.message(f"step {loop.step}: unfreezing {plan.optimization.freeze}")
    return end_freezing
