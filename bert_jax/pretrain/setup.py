"""What a pretraining config builds before it touches data, a workdir or a device (its `Setup`).

And the checks of that config against the model and the target. `bert-jax pretrain` (`pretrain.job`)
runs the Setup; `bert-jax compile` (`bert_jax.aot.compile`) compiles it for a TPU slice or GPU
hosts."""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax
import ml_collections
import optax

from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError, check_divisible, check_learning_rate
from bert_jax.models import matching
from bert_jax.models.config import BertConfig, check_inputs_fit
from bert_jax.models.electra import ElectraNetworks
from bert_jax.models.heads import BertForPreTraining
from bert_jax.pretrain import distill, inputs
from bert_jax.pretrain.electra import Electra
from bert_jax.pretrain.steps import BertPretraining, dummy_inputs, jit_steps
from bert_jax.train import objective as objectives
from bert_jax.train import perf, run_config, sharding
from bert_jax.train.model_config import run_bert_config
from bert_jax.train.optim import make_optimizer
from bert_jax.train.train_state import StatePlan


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a pretraining config builds before it touches data, a workdir or a device.

    The objective (BERT's or ELECTRA's; a distillation teacher's joins it in
    `distill.load_distillation`), the networks it trains (`network_configs`, the discriminator's
    first), optimizer and schedule, the partitioner, the TrainState's sharded layout and the jitted
    steps. `bert-jax pretrain` runs it; `bert-jax compile` compiles it for a TPU slice or GPU hosts
    (`bert_jax.aot.compile`)."""

    config: ml_collections.ConfigDict
    bert_config: BertConfig
    objective: BertPretraining | Electra
    network_configs: tuple[BertConfig, ...]
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    partitioner: sharding.Partitioner
    state_plan: StatePlan
    data_options: DataOptions  # the config's, once; each reader sets its batching fields

    @classmethod
    def build(cls, config: ml_collections.ConfigDict, vocab_size: int, *,
              devices: Sequence[jax.Device] | None = None,
              process_count: int | None = None,
              init_config: BertConfig | None = None,
              teacher: BertConfig | None = None) -> "Setup":
        """Builds a run's `Setup` from its config, checking the config against the target.

        The config is built by `config_loader`, which checked its schema; the check is
        `check_pretraining_config`, against `devices` (default: all of this job's) and its
        `process_count` hosts (default: this job's). vocab_size: the tokenizer's
        (used unless the model sets one). init_config: init_from's architecture, which `model=''`
        takes. teacher: the distillation teacher as it runs (`distill.teacher_bert_config`), whose
        states the student may learn. Reads no files and writes none."""
        run_config.require_built(config, "pretrain")
        if config.model == "" and init_config is None:
            raise UserError("model='' takes the architecture of init_from, but init_from is "
                            "not set: name a preset or set --config.init_from")
        bert_config = run_bert_config(config, init_config if config.model == "" else
                                      config.model, vocab_size)
        partitioner = sharding.Partitioner.from_config(config, devices)
        hosts = jax.process_count() if process_count is None else process_count
        check_pretraining_config(config, bert_config, vocab_size, partitioner.batch_shards,
                                 hosts)
        data_options = DataOptions.from_config(config)  # and the data options' own rules
        if teacher is not None:
            matching.check_matching(bert_config, teacher, hidden_weight=config.hidden_weight,
                                    attention_weight=config.attention_weight, same_heads=True)
        if config.objective == "electra":
            model = ElectraNetworks.build(bert_config, config.generator_size)
            objective = Electra(model, float(config.disc_weight), partitioner.rules)
            bert_config = model.discriminator.config
            network_configs = (bert_config, model.generator.config)
        else:
            model = BertForPreTraining(bert_config, config.next_sentence_prediction)
            objective, network_configs = BertPretraining(model, partitioner.rules), (bert_config,)
        tx, schedule = make_optimizer(
            learning_rate=config.learning_rate, num_train_steps=config.num_train_steps,
            warmup_steps=config.warmup_steps, optimizer=config.optimizer,
            weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
            lr_schedule=config.lr_schedule)
        dummy = dummy_inputs(1, config.max_seq_length, config.max_predictions_per_seq)
        # With the projection to a teacher's width when the student learns its states.
        trained = model if teacher is None else distill.init_model(model, config, teacher)
        init_fn = lambda key: trained.init(key, *dummy)["params"]
        state_plan = StatePlan.build(init_fn, tx, partitioner, config.rng_impl)
        return cls(config, bert_config, objective, network_configs, tx, schedule, partitioner,
                   state_plan, data_options)

    def jit_steps(self, objective: objectives.Objective | None = None):
        """(train_step, eval_step) of `objective` (default: this run's own).

        Over this run's optimizer and state layout (`steps.jit_steps`)."""
        return jit_steps(objective or self.objective, self.tx, self.partitioner,
                         self.state_plan.shardings, self.config.grad_accum_steps)

    def model_flops_per_step(self) -> float:
        """The model FLOPs of one training step, ELECTRA's generator included.

        `perf.train_flops_per_example` of the global batch."""
        c = self.config
        return c.global_batch_size * sum(perf.train_flops_per_example(
            b, c.max_seq_length, c.max_predictions_per_seq) for b in self.network_configs)

    def abstract_batch(self) -> dict:
        """The global batch as sharded `jax.ShapeDtypeStruct`s.

        Shaped as the pipeline emits it (`pipeline.batch_spec`)."""
        from bert_jax.data.pipeline import batch_spec
        options = dataclasses.replace(self.data_options,
                                      per_host_batch_size=self.config.global_batch_size)
        batch = self.partitioner.batch_sharding
        return {k: jax.ShapeDtypeStruct(shape, dtype, sharding=batch) for k, (shape, dtype)
                in batch_spec(options, self.config.next_sentence_prediction).items()}


def _describe(spec) -> str:
    """A model spec (preset name or ConfigDict of fields) on one line."""
    return repr(spec if isinstance(spec, str) else spec.to_dict())


def check_pretraining_config(config: ml_collections.ConfigDict, bert_config: BertConfig,
                             vocab_size: int, batch_multiple: int, process_count: int) -> None:
    """The rules of a pretraining config beyond its schema's.

    The schema's are one key's type and range (`run_config.check`); these are between keys, and
    against the model and the target. Touches no file; raises UserError naming the key.
    batch_multiple: the mesh's batch shards; process_count: the hosts the run will have (each feeds
    an equal share of the batch). The input files are checked apart (`inputs.resolve_files`):
    compiling needs none; the data options' own rules where `Setup.build` makes them."""
    check_learning_rate(config.learning_rate, config.allow_zero_learning_rate)
    inputs.check_eval_fraction(config.eval_fraction, config.eval_every_steps)
    if config.warmup_steps > config.num_train_steps:
        raise UserError(f"warmup_steps {config.warmup_steps} exceeds num_train_steps "
                        f"{config.num_train_steps}")
    if config.max_predictions_per_seq > config.max_seq_length:
        raise UserError(f"max_predictions_per_seq {config.max_predictions_per_seq} exceeds "
                        f"max_seq_length {config.max_seq_length}")
    check_inputs_fit(bert_config, f"model {_describe(config.model)}",
                     max_seq_length=config.max_seq_length, vocab_size=vocab_size)
    if config.objective == "electra":
        _check_electra(config)
    check_divisible("global_batch_size", config.global_batch_size,
                    math.lcm(batch_multiple * config.grad_accum_steps, process_count),
                    "batch shards x grad_accum_steps, and the process count")


def _check_electra(config: ml_collections.ConfigDict) -> None:
    """What ELECTRA's objective does not combine with.

    A next-sentence task (its discriminator has no such head), a distillation teacher, init_from (a
    run starts from random weights or resumes its own checkpoints)."""
    for key, value, hint in (
            ("next_sentence_prediction", config.next_sentence_prediction, "false"),
            ("teacher", config.teacher, "''"), ("init_from", config.init_from, "''")):
        if value:
            raise UserError(f"objective 'electra' does not combine with {key}={value!r}: "
                            f"set --config.{key}={hint} (or use the electra_* recipes)")
