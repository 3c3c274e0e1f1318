"""The fine-tuning loop shared by every task: restore the encoder, fresh head, BERT's
optimizer, jitted train/eval steps over the device mesh, evaluation after every
epoch, the best (or the last) model kept in `WORKDIR/best/`, final metrics in
`WORKDIR/eval_results.json`.

The step functions are module-level and pure; model, task and optimizer are bound
in with `functools.partial`, and dropout keys derive from the step number.
In a multi-process job every process reads and batches the (small) fine-tuning
data alike and places its own devices' rows; eval outputs are replicated so every
process sees them all, and process 0 writes the files. Running the kept model
afterwards (`load_finetuned`) is `bert_jax.finetune.inference`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from bert_jax import (chars, checkpoint, config_schema, multihost, optim, paths, preemption,
                      pretrained, sharding, train_loop, training, workdir_kind)
from bert_jax.config import (BertConfig, ConfigError, check_inputs_fit, from_spec,
                             run_bert_config)
from bert_jax.data import lengths
from bert_jax.errors import Interrupted, UserError, check_learning_rate
from bert_jax.finetune import files, packing, tasks
from bert_jax.finetune.inference import (EVALUATE_RESULTS_FILE, make_eval_fn, predict_features,
                                         round_up)
from bert_jax.metrics_writer import MetricsWriter
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.tokenization.base import uncovered_text_warning

log = logging.getLogger("bert_jax.finetune")

KEEP_CHECKPOINTS = 2  # training checkpoints kept for resuming (removed when the run ends)
PREDICTIONS_DIR = "predictions"
# What a fresh run would replace: moved to WORKDIR/previous/ (`workdir_kind.set_aside`).
EARLIER_RUN = [checkpoint.CHECKPOINTS_DIR, PREDICTIONS_DIR, pretrained.RESULTS_FILE,
               EVALUATE_RESULTS_FILE, pretrained.BEST_DIR, "metrics.jsonl", "tensorboard"]


@dataclasses.dataclass
class ModelSource:
    """The encoder to start from: its config, tokenizer and (numpy) parameters, read once
    (`resolve_model`) and placed into each run's fresh model (`init_params`)."""

    config: BertConfig
    tokenizer: Any
    encoder_params: dict | None
    origin: str

    def init_params(self, params: dict, shardings: dict) -> dict:
        """A fresh task model's `params` (placed with `shardings`) with this encoder's
        weights in place of the random encoder (`pretrained.init_params`; a tagger's or
        span model has no pooler, so the source's is dropped, and a source without one,
        such as a masked-LM checkpoint, leaves the pooler fresh, as transformers does);
        as they are for a random encoder."""
        if self.encoder_params is None:
            return params
        loaded = self.encoder_params
        if "pooler" in params["bert"] and "pooler" not in loaded:
            log.warning("%s has no pooler: the classifier's pooler starts from random "
                            "weights (or set pooling=mean)", self.origin)
            loaded = {**loaded, "pooler": jax.device_get(params["bert"]["pooler"])}
        encoder = pretrained.init_params(params["bert"], loaded, shardings["bert"],
                                         drop=("pooler",), source=self.origin)
        return {**params, "bert": encoder}


def resolve_model(config) -> ModelSource:
    """The encoder of `config.init_from` (checked against `config.model` when both are set),
    or a randomly initialised `config.model` with `config.tokenizer`; with the run's
    numerics and dropout (`run_bert_config`)."""
    if config.init_from:
        pre = pretrained.load(config.init_from)
        tokenizer = load_tokenizer(config.tokenizer or pre.tokenizer_dir)
        if config.model:
            wanted = from_spec(config.model, pre.config.vocab_size)
            for field in ("vocab_size", "hidden_size", "num_hidden_layers",
                          "num_attention_heads", "intermediate_size", "model_type",
                          "embedding_size"):
                have, want = getattr(pre.config, field), getattr(wanted, field)
                if have != want:
                    raise ConfigError(
                        f"checkpoint {config.init_from} has {field}={have} but the config asks "
                        f"for {field}={want} (model={config.model!r}); drop --config.model "
                        "to use the checkpoint's architecture")
        if tokenizer.vocab_size != pre.config.vocab_size:
            raise ConfigError(f"the tokenizer has {tokenizer.vocab_size} tokens but checkpoint "
                              f"{config.init_from} has vocab_size={pre.config.vocab_size}")
        bert_params = pre.params.get("bert", pre.params)
        return ModelSource(run_bert_config(config, pre.config), tokenizer, bert_params,
                           config.init_from)
    if not config.model:
        raise ConfigError("nothing to fine-tune: pass --init_from CHECKPOINT (a model directory or "
                          "a pretraining workdir) or --config.model=PRESET for a random encoder")
    tokenizer = load_tokenizer(config.tokenizer or DEFAULT_VOCAB)
    spec = config.model if isinstance(config.model, str) else dict(config.model)
    return ModelSource(run_bert_config(config, config.model, tokenizer.vocab_size), tokenizer,
                       None, f"random {spec}")


# --- steps -----------------------------------------------------------------------------

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


def train_step(state, batch, extra=None, *, loss_fn, coefficients, tx, grad_accum_steps=1):
    """One update: (TrainState, batch of [B, ...] arrays, extra) -> (TrainState, metrics);
    `loss_fn` is an `Objective.loss` with model, task and rules bound. With
    grad_accum_steps = k the batch runs as k sequential micro-batches and gives the
    whole batch's update (`training.objective_and_grads`).
    A non-finite loss or gradient norm skips it (`training.apply_gradients`)."""
    terms_fn = lambda params, micro_batch, key: loss_fn(params, micro_batch, extra, key)
    loss, grads, metrics = training.objective_and_grads(
        terms_fn, coefficients, state.params, batch, state.step_rng(), grad_accum_steps)
    state, grad_norm, finite = training.apply_gradients(state, grads, loss, tx)
    metrics["loss"] = loss
    metrics["examples"] = jnp.sum(batch["example_weights"])
    metrics["grad_norm"] = grad_norm
    metrics["nonfinite"] = ~finite
    return state, metrics


# --- host side -------------------------------------------------------------------------

def subsample(items: list, limit: int, seed: int) -> list:
    if not limit or len(items) <= limit:
        return items
    keep = np.sort(np.random.default_rng(seed).permutation(len(items))[:limit])
    return [items[i] for i in keep]


def _train_batches(task, features, config, epoch: int, seed: int, multiple: int,
                   rows_per_batch: int):
    batch_seed = seed * 1000 + epoch
    if config.packing:
        return packing.packed_batches(features, rows_per_batch, config.max_seq_length,
                                      config.max_examples_per_row, task.sequence_keys,
                                      shuffle_seed=batch_seed)
    return packing.padded_batches(features, round_up(config.global_batch_size, multiple),
                                  config.max_seq_length, task.sequence_keys,
                                  bucketing=config.length_bucketing, shuffle_seed=batch_seed)


def load_eval_sets(task, tokenizer, config, seed: int) -> dict[str, tuple[list, list]]:
    """{split: (examples, features)} for the eval splits and a labeled test split."""
    sets = {}
    for split in task.eval_splits:
        examples = subsample(task.load(split), config.max_eval_examples, seed)
        sets[split] = (examples, task.featurize(examples, tokenizer, config.max_seq_length,
                                                training=False))
    return sets


# What to change when a run diverges (training.NonFiniteGuard's message).
DIVERGENCE_LEVERS = ("a lower --config.learning_rate, a larger --config.warmup_proportion, "
                     "float32 instead of --config.compute_dtype=bfloat16, or gradient clipping "
                     "(--config.max_grad_norm=1.0).")


ZERO_LEARNING_RATE = ("; a linear probe trains the head alone: --config.freeze='bert/*' "
                      "with a learning rate > 0; to score a fine-tuned model without "
                      "training: bert-jax evaluate --workdir DIR")


def check_finetuning_config(config) -> None:
    """The checks of a fine-tuning config that need no data: its schema's
    (`config_schema.check`, for configs made without `load_config`: a distillation's, a
    grid's runs) and the rules beyond it. Raises UserError naming the key. Batch sizes
    are rounded up to a multiple of the mesh's batch shards."""
    config_schema.check(config, config_schema.FINETUNE)
    check_learning_rate(config.learning_rate, zero_hint=ZERO_LEARNING_RATE)
    if not config.num_train_epochs > 0:
        raise UserError(f"num_train_epochs must be a number > 0, got {config.num_train_epochs!r}")
    if config.global_batch_size % config.grad_accum_steps:
        raise UserError(f"global_batch_size {config.global_batch_size} is not a multiple of "
                        f"grad_accum_steps {config.grad_accum_steps}")


# A length no example reaches: featurized with it, nothing is truncated.
UNLIMITED_LENGTH = 1 << 30


def train_length_coverage(config, source: ModelSource) -> dict[str, Any]:
    """Token lengths ([CLS] and [SEP]s included; a multiple-choice example's longest choice)
    of the task's training examples before truncation, as `lengths.coverage` reports them.
    Resolves `max_seq_length="auto"` in `config` first: the smallest multiple of 8 that
    covers 95% of them, at most the model's max_position_embeddings."""
    task = tasks.get_task(config)
    examples = task.load("train")
    task.prepare(examples)
    sizes = []
    for feature in task.featurize(examples, source.tokenizer, UNLIMITED_LENGTH, training=False):
        ids = feature["input_ids"]
        nested = len(ids) and isinstance(ids[0], (list, tuple, np.ndarray))
        sizes.append(max(map(len, ids)) if nested else len(ids))
    auto = config.max_seq_length == "auto"
    if auto:
        with config.ignore_type():  # "auto" made the field a str
            config.max_seq_length = lengths.covering_length(
                sizes, source.config.max_position_embeddings)
    return {**lengths.coverage(sizes, config.max_seq_length), "auto": auto}


def finetune(config, workdir: str) -> dict[str, Any]:
    """Fine-tunes with one seed (`config.seed`); returns what eval_results.json holds."""
    return Finetuning(config).run(config, workdir)


class Finetuning:
    """Fine-tuning runs of one task on one model that share the tokenized data and the
    compiled steps: `run(config, workdir)` for each learning rate, epoch count, batch
    size or seed. `objective` replaces the task loss (distillation), `source` the
    encoder `resolve_model` would pick. The optimizer keeps its learning rate and
    schedule in its state (`optim.make_optimizer(injected=True)`), so such runs reuse
    one compiled train step (one per batch shape). Data is tokenized once, or once per seed when
    `max_train_examples`/`max_eval_examples` draw a seed-dependent subset."""

    def __init__(self, config, objective: Objective | None = None,
                 source: ModelSource | None = None):
        check_finetuning_config(config)
        self.config = config
        self.objective = objective or Objective()
        self.source = source or resolve_model(config)
        task = tasks.get_task(config)
        if config.packing and not task.supports_packing:  # before any data is read
            raise ValueError(f"task {task.name!r} does not support packing"
                             + (" with a CRF" if config.crf else ""))
        self.length_coverage = train_length_coverage(config, self.source)
        check_inputs_fit(self.source.config, self.source.origin,
                         max_seq_length=config.max_seq_length)
        self.rules = config.logical_axis_rules
        self.mesh = sharding.config_mesh(config)
        self.multiple = sharding.batch_size_multiple(self.mesh, self.rules)
        self._prepared: dict[Any, _Prepared] = {}

    def prepared(self, seed: int) -> "_Prepared":
        config = self.config
        key = seed if config.max_train_examples or config.max_eval_examples else None
        if key not in self._prepared:
            # A fresh task per data set: `prepare` reads labels from the training subset.
            task = tasks.get_task(config)
            tokenizer = self.source.tokenizer
            train_examples = subsample(task.load("train"), config.max_train_examples, seed)
            task.prepare(train_examples)
            train_features = task.featurize(train_examples, tokenizer, config.max_seq_length,
                                            training=True)
            if not train_features:
                raise ValueError(f"task {task.name!r}: no training features")
            _warn_if_uncovered(tokenizer, train_features, f"task {task.name!r}'s training data",
                               train_examples)
            warn_if_degenerate(config, task)
            for split in task.test_splits:  # read again after training; a bad file fails now
                try:
                    task.check_labels(task.load(split))
                except ValueError as e:
                    raise UserError(f"the {split} split: {e}") from e
            model = task.model(self.source.config)
            if self.objective.wrap_model is not None:
                model = self.objective.wrap_model(model)
            self._prepared[key] = _Prepared(task, train_features,
                                            load_eval_sets(task, tokenizer, config, seed),
                                            model, self.objective)
        return self._prepared[key]

    def run(self, config, workdir: str) -> dict[str, Any]:
        """One run with `config`'s seed and optimisation settings (its data, model and
        numerics settings must be the session's). Resumes from WORKDIR's checkpoint of
        the same run when an earlier one was interrupted; raises preemption.Preempted
        after checkpointing when the command's watcher (`preemption.active`) says so."""
        check_finetuning_config(config)
        if config.max_seq_length == "auto":  # a grid's copy of the session's config
            with config.ignore_type():
                config.max_seq_length = self.config.max_seq_length
        data = self.prepared(int(config.seed))
        accum = config.grad_accum_steps
        multiple = self.multiple * accum  # each micro-batch spans the batch shards
        if accum > 1 and config.global_batch_size % multiple:
            raise UserError(f"global_batch_size {config.global_batch_size} is not a multiple "
                            f"of grad_accum_steps {accum} x {self.multiple} batch shards")
        plan = _Plan.of(config, data, multiple)
        run = checkpoint.run_description(config.to_dict(), self.source.config.to_dict(),
                                         self.source.tokenizer.fingerprint())
        state, shardings, kept, writer, ckpt = self._start(config, workdir, data, plan, run)
        frozen = plan.frozen_at(int(state.step))
        step_fn, eval_fn = data.steps(plan.tx if frozen else plan.full_tx, shardings, self.mesh,
                                      self.rules, config.freeze if frozen else "", accum)
        batches = _EpochBatches(lambda epoch: _train_batches(
            data.task, data.train_features, config, epoch, int(config.seed), multiple,
            plan.rows_per_batch), plan.num_epochs, skip=int(state.step))
        loop = train_loop.Loop(
            state, step_fn, lambda batch: sharding.shard_full_batch(batch, self.mesh, self.rules),
            num_steps=plan.num_steps, writer=writer, learning_rate=plan.schedule,
            guard=training.NonFiniteGuard(config.max_consecutive_nonfinite,
                                          stop_at_first=config.on_nonfinite == "stop",
                                          levers=DIVERGENCE_LEVERS, log=log),
            log_every=config.log_every_steps, step_args=(self.objective.extra,),
            counted=("examples",), on_step=ckpt.check)
        epoch_end = lambda loop: batches.epoch_ended or loop.is_last
        actions = [train_loop.Every(0, self._unfreezer(config, data, plan), at_end=False,
                                    when=lambda loop: loop.step == plan.frozen_steps),
                   train_loop.Every(0, self._keeper(config, workdir, data, eval_fn, batches,
                                                    kept, plan), when=epoch_end)]
        save = train_loop.Every(config.checkpoint_every_steps, lambda loop: ckpt.save(
            loop.step, loop.state, {**run, "kept": kept.summary()}), when=epoch_end)
        with jax.set_mesh(self.mesh), preemption.interrupt_request(log) as stop, \
                ckpt.saves_finished():
            reason = loop.run(batches, actions, checkpoint=save, watcher=preemption.active(),
                              stop=stop)
            ckpt.wait()
            ckpt.close()
            if reason == train_loop.DONE and loop.guard.summary():
                writer.message(f"done: {loop.guard.summary()}")
            writer.close()
            if reason == train_loop.INTERRUPTED:
                raise Interrupted(f"interrupted at step {loop.step}: checkpoint saved in "
                                  f"{ckpt.directory}; the same command resumes from it")
            if reason == train_loop.PREEMPTED:
                raise preemption.Preempted(loop.step)
            results = self._results(config, data, plan, loop, kept)
            kept_params = kept.params_or_saved(workdir, loop.state,
                                               self.objective.unsaved)
            results.update(predict_test(data.task, self.source.tokenizer, kept_params,
                                        eval_fn, config, self.mesh, workdir))
        if multihost.is_primary():
            paths.write_text(paths.join(workdir, pretrained.RESULTS_FILE),
                             json.dumps(results, indent=2))
            paths.rmtree(ckpt.directory, missing_ok=True)  # the run is complete
        multihost.sync("finetune_results_written")
        return results

    def _start(self, config, workdir, data, plan, run):
        """(state, shardings, _Kept, writer, Checkpointer): WORKDIR's checkpoint of this
        run, or a fresh state with the encoder's weights (an earlier run's outputs and
        checkpoints are replaced)."""
        ckpt = checkpoint.Checkpointer(workdir, keep=KEEP_CHECKPOINTS)
        latest = ckpt.latest_step()
        tx = plan.tx if plan.frozen_at(latest or 0) else plan.full_tx
        target = sharding.abstract_state(plan.init_fn, tx, self.mesh, rules=self.rules,
                                         rng_impl=config.rng_impl)
        shardings = jax.tree.map(lambda s: s.sharding, target)
        try:
            restored = ckpt.restore(target, run=run, start_fresh=True)
        except checkpoint.IncompatibleCheckpointError as e:
            log.warning("%s: starting over", e)
            restored = None
        aside = None
        if restored is None:  # a fresh run: an earlier one's results are moved aside
            ckpt.close()
            if multihost.is_primary():
                aside = workdir_kind.set_aside(workdir, EARLIER_RUN)
                paths.rmtree(ckpt.directory, missing_ok=True)  # left only in a bucket
            multihost.sync("finetune_checkpoints_removed")
            ckpt = checkpoint.Checkpointer(workdir, keep=KEEP_CHECKPOINTS)
        paths.makedirs(workdir)
        # An earlier run's outputs would pass for this run's.
        paths.rmtree(paths.join(workdir, PREDICTIONS_DIR), missing_ok=True)
        for stale in (pretrained.RESULTS_FILE, EVALUATE_RESULTS_FILE):
            if paths.exists(paths.join(workdir, stale)):
                paths.remove(paths.join(workdir, stale))
        writer = MetricsWriter(workdir, total_steps=plan.num_steps, append=restored is not None)
        if restored is not None:
            state, meta, step = restored
            # The saved rate and schedule give way to this run's (a resume may change them).
            state = state.replace(opt_state=optim.set_hyperparams(state.opt_state,
                                                                  **plan.hyperparams))
            writer.drop_after(step)
            writer.message(f"resumed from step {step} of {ckpt.directory}")
            return state, shardings, _Kept(**meta["kept"]), writer, ckpt
        if aside:
            writer.message(f"{workdir} held an earlier fine-tuning run: its results are moved "
                           f"to {aside}")
        elif writer.replaced_earlier_run:
            writer.message(f"{workdir} held an earlier fine-tuning run: its metrics, best model "
                           "and results are replaced")
        state, shardings = sharding.create_sharded_state(
            plan.init_fn, plan.tx if plan.frozen_steps else plan.full_tx, self.mesh,
            rules=self.rules, seed=int(config.seed), rng_impl=config.rng_impl)
        state = state.replace(params=self.source.init_params(state.params, shardings.params))
        writer.message(f"{self.objective.describe} {data.task.name} from {self.source.origin}: "
                       f"{len(data.train_features)} train features, {plan.steps_per_epoch} "
                       f"steps/epoch, {plan.num_steps} steps, lr {config.learning_rate:g}"
                       + (f", packed {plan.rows_per_batch} rows/batch" if config.packing else ""))
        writer.message(lengths.describe(self.length_coverage, "train examples")
                       + (" (max_seq_length=auto)" if self.length_coverage["auto"] else ""))
        return state, shardings, _Kept(), writer, ckpt

    def _unfreezer(self, config, data, plan):
        """The action that ends `config.freeze`'s hold: every parameter trains on."""
        def unfreeze(loop):
            if loop.step >= loop.num_steps:
                return
            loop.state, shardings = _unfreeze(loop.state, plan.full_tx, plan.init_fn,
                                              self.mesh, self.rules, config.rng_impl)
            loop.step_fn, _ = data.steps(plan.full_tx, shardings, self.mesh, self.rules, "",
                                         config.grad_accum_steps)
            loop.writer.message(f"step {loop.step}: unfreezing {config.freeze}")
        return unfreeze

    def _keeper(self, config, workdir, data, eval_fn, batches, kept, plan):
        """The epoch-end action: evaluate, log, and keep the model in WORKDIR/best when
        `config.keep_checkpoint` says so."""
        task, bert_config = data.task, self.source.config
        spec = {**task.spec(), "config": _absolute_paths(config.to_dict()),
                "max_seq_length": config.max_seq_length}

        def keep(loop):
            scores = evaluate_sets(task, loop.state.params, data.eval_sets, eval_fn, config,
                                   self.mesh)
            for split, values in scores.items():
                loop.writer.write(loop.step, values, prefix=split)
            main = scores[task.eval_splits[0]][task.selection_metric]
            loop.writer.message(f"epoch {batches.epoch + 1}: " + json.dumps(scores))
            last = loop.is_last or batches.epoch + 1 == plan.num_epochs
            if not _keep(config.keep_checkpoint, kept, main, last=last):
                return
            # Host copies on every process (the parameters may span processes).
            params = multihost_utils.process_allgather(loop.state.params, tiled=True)
            loop.guard.check_params(params, f"{workdir}/{pretrained.BEST_DIR}")
            kept.update(main, batches.epoch + 1, scores, params)
            if multihost.is_primary():
                saved = {k: v for k, v in params.items() if k not in self.objective.unsaved}
                pretrained.save(paths.join(workdir, pretrained.BEST_DIR), bert_config, saved,
                                tokenizer=self.source.tokenizer, task=spec, overwrite=True)
        return keep

    def _results(self, config, data, plan, loop, kept) -> dict[str, Any]:
        task = data.task
        examples_per_second = loop.totals["examples"] / max(loop.train_seconds, 1e-9)
        return {"task": task.name, "seed": int(config.seed),
                "learning_rate": config.learning_rate,
                "num_train_epochs": config.num_train_epochs,
                "global_batch_size": config.global_batch_size,
                "keep_checkpoint": config.keep_checkpoint, "kept_epoch": kept.epoch,
                "selection_metric": task.selection_metric,
                "selection_split": task.eval_splits[0], **kept.metrics,
                "frozen_steps": min(plan.frozen_steps, loop.step), "train_steps": loop.step,
                "train_seconds": round(loop.train_seconds, 2),
                "first_step_seconds": round(loop.first_step_seconds, 2),
                "train_examples_per_second": round(examples_per_second, 2),
                "max_seq_length": config.max_seq_length,
                "length_coverage": self.length_coverage}


@dataclasses.dataclass
class _Plan:
    """A run's schedule: steps, epochs, the optimizer (and its frozen form) and the
    learning rate at each update count."""

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
    def of(cls, config, data, multiple: int) -> "_Plan":
        rows_per_batch = 0
        if config.packing:
            per_row, rows_per_batch = packing.packed_plan(
                data.train_features, config.max_seq_length, config.max_examples_per_row,
                config.global_batch_size, multiple)
            steps_per_epoch = math.ceil(len(data.train_features) / per_row / rows_per_batch)
        else:
            steps_per_epoch = math.ceil(len(data.train_features)
                                        / round_up(config.global_batch_size, multiple))
        num_steps = max(1, int(config.num_train_epochs * steps_per_epoch))
        hyperparams = dict(learning_rate=config.learning_rate, num_train_steps=num_steps,
                           warmup_steps=int(config.warmup_proportion * num_steps))
        full_tx, schedule = optim.make_optimizer(
            **hyperparams, optimizer=config.optimizer, weight_decay=config.weight_decay,
            max_grad_norm=config.max_grad_norm, injected=True)
        dummy = jnp.ones((1, 8), jnp.int32)
        init_fn = lambda key: data.model.init({"params": key, "dropout": key}, dummy, dummy,
                                              dummy)["params"]
        frozen_steps = _frozen_steps(config, steps_per_epoch, num_steps)
        tx = full_tx
        if frozen_steps:
            shapes = nn.unbox(jax.eval_shape(init_fn, jax.random.key(0)))
            tx = optim.freeze(full_tx, optim.frozen_mask(shapes, config.freeze))
        return cls(steps_per_epoch, num_steps, math.ceil(config.num_train_epochs),
                   rows_per_batch, frozen_steps, full_tx, tx, schedule, init_fn, hyperparams)

    def frozen_at(self, step: int) -> bool:
        """Whether the state after `step` steps has the frozen optimizer state (the
        unfreezing follows step `frozen_steps`, unless that is the last)."""
        return bool(self.frozen_steps) and (step < self.frozen_steps
                                            or self.frozen_steps >= self.num_steps)


class _EpochBatches:
    """The run's training batches, epoch after epoch (`make_epoch(epoch)`), from step
    `skip` on: a resumed run gets the batches an uninterrupted one would. `epoch` and
    `epoch_ended` describe the batch taken last."""

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


@dataclasses.dataclass
class _Kept:
    """The model kept in WORKDIR/best: its validation score, epoch (1-based; None before
    the first evaluation) and metrics; its parameters while this process has them."""

    score: float | None = None
    epoch: int | None = None
    metrics: dict | None = None
    params: Any = dataclasses.field(default=None, repr=False)

    def update(self, score, epoch, metrics, params) -> None:
        self.score, self.epoch, self.metrics, self.params = float(score), epoch, metrics, params

    def summary(self) -> dict:
        """What a checkpoint records (JSON)."""
        return json.loads(json.dumps({"score": self.score, "epoch": self.epoch,
                                      "metrics": self.metrics}, default=float))

    def params_or_saved(self, workdir, state, unsaved: tuple):
        """The kept parameters placed like `state.params`: this process's copy, or (a run
        resumed after keeping them) WORKDIR/best's, with the `unsaved` ones of `state`."""
        shardings = jax.tree.map(lambda x: x.sharding, state.params)
        if self.params is not None:
            return jax.device_put(self.params, shardings)
        saved = pretrained.load(paths.join(workdir, pretrained.BEST_DIR)).params
        target = {k: v for k, v in state.params.items() if k not in unsaved}
        params = pretrained.init_params(target, saved, {k: shardings[k] for k in target},
                                        source=f"{workdir}/{pretrained.BEST_DIR}")
        return {**params, **{k: state.params[k] for k in unsaved if k in state.params}}


@dataclasses.dataclass
class _Prepared:
    """One data set's task, features and model, and the steps compiled for them."""

    task: Any
    train_features: list
    eval_sets: dict
    model: nn.Module
    objective: Objective
    _steps: dict = dataclasses.field(default_factory=dict)

    def steps(self, tx, shardings, mesh, rules, frozen: str = "", grad_accum_steps: int = 1):
        """(train step, eval step), jitted once per set of `frozen` patterns and
        accumulation count: later runs pass states whose optimizer hyperparameters differ
        but whose structure and shardings are the same."""
        key = (frozen, grad_accum_steps)
        if key not in self._steps:
            loss_fn = functools.partial(self.objective.loss, model=self.model, task=self.task,
                                        rules=rules)
            step_fn = jax.jit(functools.partial(train_step, loss_fn=loss_fn, tx=tx,
                                                coefficients=self.objective.coefficients,
                                                grad_accum_steps=grad_accum_steps),
                              in_shardings=(shardings, sharding.batch_sharding(mesh, rules),
                                            self.objective.extra_shardings),
                              out_shardings=(shardings, None), donate_argnums=0)
            self._steps[key] = (step_fn, make_eval_fn(self.model, self.task, rules,
                                                      shardings.params, mesh))
        return self._steps[key]


def _strings(value):
    """The strings in an example's value (a text, a word list, a dict of texts)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


def _warn_if_uncovered(tokenizer, features: list, what: str, examples: list) -> None:
    """Warns when the vocabulary turns much of the text into [UNK] (up to 1000 features;
    about Chinese only when the examples' text is mostly CJK)."""
    rows = []
    for feature in features[:1000]:
        ids = feature["input_ids"]  # a row, or one row per choice (multiple choice)
        rows += [np.asarray(r).reshape(-1) for r in
                 (ids if len(ids) and not np.isscalar(ids[0]) else [ids])]
    ids = np.concatenate(rows)
    special = np.isin(ids, [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id])
    warning = uncovered_text_warning(int((ids == tokenizer.unk_id).sum()),
                                     int((~special).sum()), what,
                                     chars.cjk_share(_strings(examples[:1000])))
    if warning:
        log.warning(warning)


def warn_if_degenerate(config, task) -> None:
    """Warns about training data that runs but teaches nothing measurable: a single
    class, or a validation file with the training file's text."""
    names = getattr(task, "label_names", None)
    if names is not None and len(names) == 1:
        log.warning("task %r: every training example has the label %r: the model can only "
                    "learn to predict it, and its accuracy says nothing", task.name, names[0])
    train, dev = config.train_file, config.validation_file
    try:
        same = bool(train and dev) and paths.getsize(train) == paths.getsize(dev) and \
            paths.read_bytes(train) == paths.read_bytes(dev)
    except OSError:  # not plain files (a glob, a list): not compared
        same = False
    if same:
        log.warning("validation_file %s holds the training file's text (%s): its scores "
                    "measure memorisation, not generalisation", dev, train)


def _frozen_steps(config, steps_per_epoch: int, num_steps: int) -> int:
    """For how many steps `config.freeze` holds: `freeze_steps`, `freeze_epochs` epochs,
    or the whole run when neither is set; 0 without patterns."""
    if not config.freeze:
        return 0
    if config.freeze_steps and config.freeze_epochs:
        raise UserError("set freeze_steps or freeze_epochs, not both")
    if config.freeze_epochs:
        return min(num_steps, math.ceil(config.freeze_epochs * steps_per_epoch))
    return min(num_steps, config.freeze_steps) if config.freeze_steps else num_steps


def _unfreeze(state, full_tx, init_fn, mesh, rules, rng_impl):
    """The state and its shardings for training every parameter: the frozen ones get
    fresh optimizer state, the others keep theirs."""
    abstract = sharding.abstract_state(init_fn, full_tx, mesh, rules=rules, rng_impl=rng_impl)
    shardings = jax.tree.map(lambda s: s.sharding, abstract)
    opt_state = jax.jit(lambda params, frozen: optim.unfreeze_state(frozen, full_tx.init(params)),
                        out_shardings=shardings.opt_state)(state.params, state.opt_state)
    return state.replace(opt_state=opt_state), shardings


def _absolute_paths(values: dict) -> dict:
    """The config with its data paths absolute, so a saved model finds its files from
    any working directory."""
    return {k: paths.abspath(v) if (k.endswith("_file") or k in ("tfds_data_dir", "glue_dir"))
            and isinstance(v, str) and v else v for k, v in values.items()}


def _keep(mode: str, kept: _Kept, score: float, last: bool) -> bool:
    """Whether this epoch's model replaces the kept one. "best": a strictly higher
    validation score (ties keep the earlier epoch); "last": the end of the schedule."""
    if mode == "last":
        return last
    return kept.epoch is None or score > kept.score


def evaluate_sets(task, params, eval_sets, eval_fn, config, mesh) -> dict[str, dict]:
    return {split: task.evaluate(examples, features,
                                 predict_features(task, params, features, eval_fn, config, mesh))
            for split, (examples, features) in eval_sets.items()}


def predict_test(task, tokenizer, params, eval_fn, config, mesh, workdir) -> dict[str, Any]:
    """Predictions (and metrics, if labeled) for the test split(s): WORKDIR/predictions/
    SPLIT.jsonl and the task's submission files."""
    out = {}
    for split in task.test_splits:
        examples = task.load(split)
        features = task.featurize(examples, tokenizer, config.max_seq_length, training=False)
        outputs = predict_features(task, params, features, eval_fn, config, mesh)
        records = task.predict(examples, features, outputs)
        if multihost.is_primary():
            files.write_jsonl(paths.join(workdir, PREDICTIONS_DIR, f"{split}.jsonl"), records)
            task.write_test_predictions(records, split, workdir)
        if examples and all(task.is_labeled(ex) for ex in examples):
            out[split] = task.evaluate(examples, features, outputs)
    return out
