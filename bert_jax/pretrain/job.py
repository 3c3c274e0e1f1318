"""`bert-jax pretrain`: BERT pretraining (masked LM + next sentence, or masked LM only with
`--config.next_sentence_prediction=False`) over a device mesh.

    bert-jax pretrain --config configs/pretrain.py:tiny --workdir runs/tiny \
        [--config.KEY=VALUE ...]

One jitted `train_step(state, batch)` (module-level, pure, donated state) maps
a sharded TrainState and a global batch to the next state. Running the same
command again resumes from WORKDIR's latest checkpoint with the same data
order, masks and dropout as an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import ml_collections
import optax

from bert_jax import (checkpoint, config_schema, lifecycle, multihost, paths, perf, pretrained,
                      sharding, train_loop, workdir_kind)
from bert_jax.config import BertConfig, check_inputs_fit, run_bert_config
from bert_jax.pretrain import distill, inputs
from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError, check_divisible, check_learning_rate
from bert_jax.heads import BertForPreTraining
from bert_jax.optim import make_optimizer
from bert_jax.pretrain.steps import dummy_inputs, evaluate, jit_steps
from bert_jax.train_state import StatePlan, TrainState

log = logging.getLogger("bert_jax.pretrain.job")


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a pretraining config builds before it touches data, a workdir or a device:
    the model, optimizer and schedule, the partitioner, the TrainState's sharded layout
    and the jitted steps. `bert-jax pretrain` runs it; `bert-jax compile` compiles it for a
    TPU topology (`bert_jax.tpu.compile`)."""

    config: ml_collections.ConfigDict
    bert_config: BertConfig
    model: nn.Module
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    partitioner: sharding.Partitioner
    state_plan: StatePlan

    def jit_steps(self, teacher: distill.MlmTeacher | None = None,
                  teacher_shardings: Any = None):
        """(train_step, eval_step) of this run (`jit_steps`)."""
        return jit_steps(self.model, self.tx, self.partitioner, self.state_plan.shardings,
                         self.config.grad_accum_steps, teacher, teacher_shardings)

    def abstract_batch(self) -> dict:
        """The global batch as sharded `jax.ShapeDtypeStruct`s, shaped as the pipeline
        emits it (`pipeline.batch_spec`)."""
        from bert_jax.data.pipeline import batch_spec
        options = DataOptions.from_config(self.config,
                                          per_host_batch_size=self.config.global_batch_size)
        batch = self.partitioner.batch_sharding
        return {k: jax.ShapeDtypeStruct(shape, dtype, sharding=batch) for k, (shape, dtype)
                in batch_spec(options, self.config.next_sentence_prediction).items()}


def setup(config: ml_collections.ConfigDict, vocab_size: int, *,
          devices: Sequence[jax.Device] | None = None,
          process_count: int | None = None) -> Setup:
    """Builds a run's `Setup` from its config, checking the config
    (`check_pretraining_config`) against the target: `devices` (default: all of this
    job's) and its `process_count` hosts (default: this job's). vocab_size: the
    tokenizer's (used unless the model sets one). Reads no files and writes none."""
    config_schema.check(config, config_schema.PRETRAIN)  # a config made without load_config
    bert_config = run_bert_config(config, config.model, vocab_size)
    partitioner = sharding.Partitioner.from_config(config, devices)
    check_pretraining_config(config, bert_config, vocab_size, partitioner.batch_shards,
                             jax.process_count() if process_count is None else process_count)
    model = BertForPreTraining(bert_config, config.next_sentence_prediction)
    tx, schedule = make_optimizer(
        learning_rate=config.learning_rate, num_train_steps=config.num_train_steps,
        warmup_steps=config.warmup_steps, optimizer=config.optimizer,
        weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
        lr_schedule=config.lr_schedule)
    init_fn = lambda key: model.init(
        key, *dummy_inputs(1, config.max_seq_length, config.max_predictions_per_seq))["params"]
    state_plan = StatePlan.build(init_fn, tx, partitioner, config.rng_impl)
    return Setup(config, bert_config, model, tx, schedule, partitioner, state_plan)





def _describe(spec) -> str:
    """A model spec (preset name or ConfigDict of fields) on one line."""
    return repr(spec if isinstance(spec, str) else spec.to_dict())


def check_pretraining_config(config: ml_collections.ConfigDict, bert_config: BertConfig,
                             vocab_size: int, batch_multiple: int, process_count: int) -> None:
    """The rules of a pretraining config beyond its schema's (one key's type and range,
    `config_schema.check`): between keys, and against the model and the target. Touches
    no file; raises UserError naming the key. batch_multiple: the mesh's batch shards;
    process_count: the hosts the run will have (each feeds an equal share of the batch).
    The input files are checked apart (`inputs.resolve`): compiling needs none."""
    check_learning_rate(config.learning_rate, config.allow_zero_learning_rate)
    inputs.check_eval_fraction(config)
    if config.teacher and not config.temperature > 0:
        raise UserError(f"temperature must be a number > 0, got {config.temperature!r}")
    if config.warmup_steps > config.num_train_steps:
        raise UserError(f"warmup_steps {config.warmup_steps} exceeds num_train_steps "
                        f"{config.num_train_steps}")
    if config.max_predictions_per_seq > config.max_seq_length:
        raise UserError(f"max_predictions_per_seq {config.max_predictions_per_seq} exceeds "
                        f"max_seq_length {config.max_seq_length}")
    DataOptions.from_config(config)  # the data options' own rules
    check_inputs_fit(bert_config, f"model {_describe(config.model)}",
                     max_seq_length=config.max_seq_length, vocab_size=vocab_size)
    check_divisible("global_batch_size", config.global_batch_size,
                    math.lcm(batch_multiple * config.grad_accum_steps, process_count),
                    "batch shards x grad_accum_steps, and the process count")


def init_state(config, setup: Setup, writer) -> TrainState:
    """A fresh state: random weights drawn from config.seed, with config.init_from's
    weights in place of them when set (weights only: a new optimizer and schedule)."""
    state = setup.state_plan.create(config.seed)
    if not config.init_from:
        return state
    loaded = pretrained.load(config.init_from)
    if not config.next_sentence_prediction and "nsp" in loaded.params:
        writer.message(f"MLM-only run: the NSP head of {config.init_from} is not used")
    plan = setup.state_plan
    params = pretrained.init_params(
        jax.device_get(state.params) if config.partial_restore else plan.abstract.params,
        loaded.params, plan.shardings.params, drop=("nsp",), partial=config.partial_restore,
        source=config.init_from,
        missing_hint=" (set partial_restore to keep fresh values for missing ones)")
    writer.message(f"initialised weights from {config.init_from}")
    return state.replace(params=params)


def run_tokenizer(config: ml_collections.ConfigDict) -> tuple[str, Any]:
    """(path, tokenizer) of a run: config.tokenizer, else init_from's own (continued
    pretraining keeps the model's vocabulary, as fine-tuning does), else the bundled
    vocabulary. An explicit tokenizer must be init_from's vocabulary: other token ids
    would silently mean other words to the loaded embeddings."""
    from bert_jax.tokenization import DEFAULT_VOCAB, has_tokenizer, load_tokenizer
    source = config.init_from and pretrained.tokenizer_dir(config.init_from)
    # A model saved without its tokenizer (`pretrained.save` allows it) has none to keep.
    model_tokenizer = load_tokenizer(source) if source and has_tokenizer(source) else None
    if not config.tokenizer:
        return ((source, model_tokenizer) if model_tokenizer
                else (DEFAULT_VOCAB, load_tokenizer(DEFAULT_VOCAB)))
    path, tokenizer = config.tokenizer, load_tokenizer(config.tokenizer)
    if model_tokenizer and model_tokenizer.fingerprint() != tokenizer.fingerprint():
        raise UserError(f"tokenizer {config.tokenizer} is not the vocabulary of init_from "
                        f"{config.init_from} ({source}): drop --config.tokenizer to use the "
                        "model's")
    return path, tokenizer


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Runs (or resumes) pretraining in `workdir`; returns the last train/eval metrics.
    Resume order: WORKDIR's latest checkpoint -> config.resume_from (any run's checkpoint
    of the same state shapes) -> config.init_from (weights only) -> scratch. Raises
    preemption.Preempted after checkpointing the step where the command's watcher
    (`preemption.active`) says to stop (`lifecycle.Job.train`)."""
    workdir = paths.abspath(workdir)
    workdir_kind.check(workdir, workdir_kind.PRETRAINING, {"--config.init_from": config.init_from,
                                                           "--config.teacher": config.teacher})
    tokenizer_path, tokenizer = run_tokenizer(config)
    run_setup = setup(config, tokenizer.vocab_size)
    bert_config, partitioner = run_setup.bert_config, run_setup.partitioner
    sources = inputs.resolve(config, tokenizer_path, tokenizer.fingerprint())
    run = checkpoint.run_description(config.to_dict(), bert_config.to_dict(),
                                     tokenizer.fingerprint())
    teacher, teacher_params, teacher_shardings = _teacher(config, run_setup, run["vocabulary"])
    # Nothing is written before this point: a config error leaves the workdir as it was.
    job = lifecycle.Job(workdir, partitioner, keep=config.keep_checkpoints)
    restored = job.restore(run_setup.state_plan.abstract, run, start_fresh=config.start_fresh,
                           resume_from=config.resume_from)
    writer = job.open_metrics(config.num_train_steps, restored)
    state = restored.state if restored else init_state(config, run_setup, writer)
    if int(state.step) >= config.num_train_steps:  # a completed run, run again
        job.close()
        writer.message(f"{workdir} holds a complete run ({int(state.step)} of "
                       f"{config.num_train_steps} steps): nothing to train (raise "
                       "--config.num_train_steps to continue); its last metrics follow")
        return {"train": writer.last("train"), "eval": writer.last("eval")}
    if multihost.is_primary():  # the workdir is then loadable as a model directory
        pretrained.write_model_files(paths.join(workdir, pretrained.WORKDIR_MODEL_DIR),
                                     bert_config, tokenizer=tokenizer)
    train_fn, eval_fn = run_setup.jit_steps(teacher, teacher_shardings)
    process = dict(process_index=jax.process_index(), process_count=jax.process_count())
    files = inputs.prepare_input_files(config, sources, workdir, tokenizer_path,
                                       run["vocabulary"], **process, message=writer.message)
    multihost.sync("input_files_ready")
    batches = inputs.make_iterator(config, files, tokenizer, split="train", **process,
                                   state=restored.meta.get("pipeline") if restored else None)
    if int(state.step) == 0:
        writer.message(f"{bert_config.num_hidden_layers} layers, H={bert_config.hidden_size}, "
                       f"mesh {dict(partitioner.mesh.shape)}, {jax.process_count()} process(es)"
                       + (f", distilling {config.teacher} (T={config.temperature:g}, "
                          f"alpha={config.alpha:g})" if teacher else ""))
    loop = job.loop(
        config, state, train_fn, partitioner.global_batch,
        num_steps=config.num_train_steps, schedule=run_setup.schedule, warmup_key="warmup_steps",
        step_args=() if teacher is None else (teacher_params,),
        per_step={"tokens": config.global_batch_size * config.max_seq_length},
        flops_per_step=config.global_batch_size * perf.train_flops_per_example(
            bert_config, config.max_seq_length, config.max_predictions_per_seq),
        peak_flops=perf.peak_flops_per_device() * jax.device_count(), progress=_PROGRESS)
    eval_metrics = {}

    def evaluate_now(loop):
        with contextlib.closing(inputs.make_iterator(config, files, tokenizer, split="eval",
                                                     **process)) as eval_batches:
            eval_metrics.update(evaluate(eval_fn, loop.state.params, eval_batches,
                                         partitioner, config.eval_steps))
        writer.write(loop.step, eval_metrics, prefix="eval")
        writer.message(f"step {loop.step} eval: " + ", ".join(
            f"{k} {v:.4f}" for k, v in eval_metrics.items()))

    with contextlib.closing(batches):
        job.train(loop, batches, [train_loop.Every(config.eval_every_steps, evaluate_now,
                                                   at_end=bool(config.eval_every_steps))],
                  checkpoint_every=config.checkpoint_every_steps,
                  checkpoint_meta=lambda loop: {**run, "pipeline": batches.get_state()})
    return {"train": loop.last, "eval": eval_metrics}


def _teacher(config, run_setup: Setup, vocabulary: str) -> tuple:
    """(MlmTeacher, its parameters, their shardings) of `config.teacher`, or Nones."""
    if not config.teacher:
        return None, None, None
    return distill.load_mlm_teacher(config, run_setup.bert_config, vocabulary,
                                    partitioner=run_setup.partitioner)


# What the progress line shows (metrics.jsonl has every metric).
_PROGRESS = ("loss", "soft_loss", "mlm_accuracy", "nsp_accuracy", "learning_rate", "grad_norm",
             "tokens_per_second", "mfu")
