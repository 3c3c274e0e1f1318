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
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from bert_jax import multihost, optim, paths, pretrained, sharding, training
from bert_jax.config import BertConfig, ConfigError, check_choice, check_inputs_fit
from bert_jax.data import lengths
from bert_jax.errors import UserError, check_positive
from bert_jax.finetune import files, packing, tasks
from bert_jax.finetune.inference import (EVALUATE_RESULTS_FILE, make_eval_fn, predict_features,
                                         round_up)
from bert_jax.metrics_writer import MetricsWriter
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.tokenization.base import uncovered_text_warning

log = logging.getLogger("bert_jax.finetune")

KEEP_CHECKPOINT = ("best", "last")  # the best validation score, or the end of training
PREDICTIONS_DIR = "predictions"


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
        span model has no pooler, so the source's is dropped); as they are for a random
        encoder."""
        if self.encoder_params is None:
            return params
        encoder = pretrained.init_params(params["bert"], self.encoder_params, shardings["bert"],
                                         drop=("pooler",), source=self.origin)
        return {**params, "bert": encoder}


def resolve_model(config) -> ModelSource:
    """The encoder of `config.init_from` (checked against `config.model` when both are set),
    or a randomly initialised `config.model` with `config.tokenizer`."""
    dropout = dict(hidden_dropout_prob=config.hidden_dropout_prob,
                   attention_probs_dropout_prob=config.attention_probs_dropout_prob)
    numerics = {field: config.get(key) for key, field in (
        ("compute_dtype", "dtype"), ("remat_policy",) * 2, ("attention_impl",) * 2)
        if config.get(key)}
    if config.init_from:
        pre = pretrained.load(config.init_from)
        tokenizer = load_tokenizer(config.tokenizer or pre.tokenizer_dir)
        if config.model:
            wanted = training.model_config(config.model, pre.config.vocab_size)
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
        return ModelSource(pre.config.replace(**dropout, **numerics), tokenizer, bert_params,
                           config.init_from)
    if not config.model:
        raise ConfigError("nothing to fine-tune: pass --init_from CHECKPOINT (a model directory or "
                          "a pretraining workdir) or --config.model=PRESET for a random encoder")
    tokenizer = load_tokenizer(config.tokenizer or DEFAULT_VOCAB)
    model_config = training.model_config(config.model, tokenizer.vocab_size)
    spec = config.model if isinstance(config.model, str) else dict(config.model)
    return ModelSource(model_config.replace(**dropout, **numerics), tokenizer, None,
                       f"random {spec}")


# --- steps -----------------------------------------------------------------------------

def task_loss(params, batch, extra, dropout_key, *, model, task, rules):
    """Fine-tuning's objective: the task's loss on the model's training outputs (`extra`
    unused). (loss, metrics)."""
    with nn.logical_axis_rules(rules):
        outputs = model.apply({"params": params}, **task.model_inputs(batch),
                              deterministic=False, rngs={"dropout": dropout_key})
    return task.loss(outputs, batch)


@dataclasses.dataclass
class Objective:
    """What the train step minimises: `loss(params, batch, extra, dropout_key, *, model,
    task, rules)` -> (loss, metrics), and `extra`, an input of every step that is not
    trained (a distillation teacher's parameters), placed with `extra_shardings`.
    `describe` names it in the run's log. `wrap_model` (task model -> model) adds
    parameters that the objective trains with the model, at the top level of its tree
    (a TinyBERT projection), and `unsaved` names those left out of the saved model."""

    loss: Any = task_loss
    extra: Any = None
    extra_shardings: Any = None
    describe: str = "fine-tuning"
    wrap_model: Any = None
    unsaved: tuple = ()


def train_step(state, batch, extra=None, *, loss_fn, tx):
    """One update: (TrainState, batch of [B, ...] arrays, extra) -> (TrainState, metrics);
    `loss_fn` is an `Objective.loss` with model, task and rules bound.
    A non-finite loss or gradient norm skips it (`training.apply_gradients`)."""
    dropout_key = state.step_rng()
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params, batch, extra, dropout_key)
    state, grad_norm, finite = training.apply_gradients(state, grads, loss, tx)
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

# Shortest row: [CLS] A [SEP] B [SEP] with a few tokens of each text.
MIN_SEQ_LENGTH = 8


def validate_config(config) -> None:
    """The checks of a fine-tuning config that need no data: raises UserError naming
    the key. Batch sizes are rounded up to a multiple of the mesh's batch shards."""
    for key in ("global_batch_size", "eval_batch_size", "log_every_steps"):
        check_positive(key, config[key])
    epochs = config.num_train_epochs
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not epochs > 0:
        raise UserError(f"num_train_epochs must be a number > 0, got {epochs!r}")
    if config.max_seq_length != "auto":  # else chosen from the data (train_length_coverage)
        check_positive("max_seq_length", config.max_seq_length)
        if config.max_seq_length < MIN_SEQ_LENGTH:
            raise UserError(f"max_seq_length must be at least {MIN_SEQ_LENGTH} ([CLS] A [SEP] "
                            f"B [SEP] with room for text), got {config.max_seq_length}")
    check_choice("keep_checkpoint", config.keep_checkpoint, KEEP_CHECKPOINT)
    check_choice("on_nonfinite", config.get("on_nonfinite", "skip"), ("skip", "stop"))
    check_positive("max_consecutive_nonfinite", config.get("max_consecutive_nonfinite", 5))
    for key in ("freeze_steps", "freeze_epochs"):
        value = config.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise UserError(f"{key} must be a number >= 0, got {value!r}")


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
        validate_config(config)
        self.config = config
        self.objective = objective or Objective()
        self.source = source or resolve_model(config)
        task = tasks.get_task(config)
        if config.packing and not task.supports_packing:  # before any data is read
            raise ValueError(f"task {task.name!r} does not support packing"
                             + (" with a CRF" if config.get("crf") else ""))
        self.length_coverage = train_length_coverage(config, self.source)
        check_inputs_fit(self.source.config, self.source.origin,
                         max_seq_length=config.max_seq_length)
        self.rules = config.logical_axis_rules
        self.mesh = sharding.make_mesh(dict(config.mesh_shape))
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
            _warn_if_uncovered(tokenizer, train_features, f"task {task.name!r}'s training data")
            for split in task.test_splits:  # read again after training; a bad file fails now
                task.load(split)
            model = task.model(self.source.config)
            if self.objective.wrap_model is not None:
                model = self.objective.wrap_model(model)
            self._prepared[key] = _Prepared(task, train_features,
                                            load_eval_sets(task, tokenizer, config, seed),
                                            model, self.objective)
        return self._prepared[key]

    def run(self, config, workdir: str) -> dict[str, Any]:
        """One run with `config`'s seed and optimisation settings (its data, model and
        numerics settings must be the session's)."""
        validate_config(config)
        if config.max_seq_length == "auto":  # a grid's copy of the session's config
            with config.ignore_type():
                config.max_seq_length = self.config.max_seq_length
        seed = int(config.seed)
        data = self.prepared(seed)
        task, model, mesh, rules = data.task, data.model, self.mesh, self.rules
        tokenizer, bert_config = self.source.tokenizer, self.source.config
        train_features = data.train_features
        rows_per_batch = 0
        if config.packing:
            per_row, rows_per_batch = packing.packed_plan(
                train_features, config.max_seq_length, config.max_examples_per_row,
                config.global_batch_size, self.multiple)
            steps_per_epoch = math.ceil(len(train_features) / per_row / rows_per_batch)
        else:
            steps_per_epoch = math.ceil(len(train_features) / round_up(config.global_batch_size,
                                                                         self.multiple))
        num_steps = max(1, int(config.num_train_epochs * steps_per_epoch))
        num_epochs = math.ceil(config.num_train_epochs)
        full_tx, schedule = optim.make_optimizer(
            learning_rate=config.learning_rate, num_train_steps=num_steps,
            warmup_steps=int(config.warmup_proportion * num_steps), optimizer=config.optimizer,
            weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm, injected=True)

        dummy = jnp.ones((1, 8), jnp.int32)
        init_fn = lambda key: model.init({"params": key, "dropout": key}, dummy, dummy,
                                         dummy)["params"]
        frozen_steps = _frozen_steps(config, steps_per_epoch, num_steps)
        tx = full_tx
        if frozen_steps:
            shapes = nn.unbox(jax.eval_shape(init_fn, jax.random.key(0)))
            tx = optim.freeze(full_tx, optim.frozen_mask(shapes, config.freeze))
        state, shardings = sharding.create_sharded_state(init_fn, tx, mesh, rules=rules,
                                                         seed=seed, rng_impl=config.rng_impl)
        state = state.replace(params=self.source.init_params(state.params, shardings.params))
        step_fn, eval_fn = data.steps(tx, shardings, mesh, rules,
                                      frozen=config.freeze if frozen_steps else "")

        paths.makedirs(workdir)
        # An earlier run's outputs would pass for this run's.
        paths.rmtree(paths.join(workdir, PREDICTIONS_DIR), missing_ok=True)
        for stale in (pretrained.RESULTS_FILE, EVALUATE_RESULTS_FILE):
            if paths.exists(paths.join(workdir, stale)):
                paths.remove(paths.join(workdir, stale))
        writer = MetricsWriter(workdir, total_steps=num_steps, append=False)
        if writer.replaced_earlier_run:
            writer.message(f"{workdir} held an earlier fine-tuning run: its metrics, best model "
                           "and results are replaced by this run's")
        writer.message(f"{self.objective.describe} {task.name} from {self.source.origin}: "
                       f"{len(train_features)} train features, {steps_per_epoch} steps/epoch, "
                       f"{num_steps} steps, lr {config.learning_rate:g}"
                       + (f", packed {rows_per_batch} rows/batch" if config.packing else ""))
        writer.message(lengths.describe(self.length_coverage, "train examples")
                       + (" (max_seq_length=auto)" if self.length_coverage["auto"] else ""))
        kept = {"score": -np.inf, "epoch": None, "metrics": None}
        guard = training.NonFiniteGuard(config.get("max_consecutive_nonfinite", 5),
                                        stop_at_first=config.get("on_nonfinite") == "stop",
                                        levers=DIVERGENCE_LEVERS, log=log)
        step, examples_seen, train_time, first_step_time = 0, 0.0, 0.0, None
        spec = {**task.spec(), "config": _absolute_paths(config.to_dict()),
                "max_seq_length": config.max_seq_length}
        with jax.set_mesh(mesh):
            for epoch in range(num_epochs):
                start, pending = time.time(), []
                for batch in _train_batches(task, train_features, config, epoch, seed,
                                            self.multiple, rows_per_batch):
                    if step >= num_steps:
                        break
                    if frozen_steps and step == frozen_steps:
                        state, shardings = _unfreeze(state, full_tx, init_fn, mesh, rules,
                                                     config.rng_impl)
                        step_fn, _ = data.steps(full_tx, shardings, mesh, rules, frozen="")
                        writer.message(f"step {step}: unfreezing {config.freeze}")
                    state, metrics = step_fn(state, sharding.shard_full_batch(batch, mesh, rules),
                                             self.objective.extra)
                    step += 1
                    pending.append(metrics)
                    if step == 1:  # the first step may compile: keep it out of the throughput
                        examples_seen -= float(metrics["examples"])
                        first_step_time = time.time() - start
                        start = time.time()
                    if step % config.log_every_steps == 0 or step == num_steps:
                        logged = jax.device_get(pending)
                        for i, m in enumerate(logged):
                            guard.check(step - len(logged) + 1 + i, float(m["loss"]),
                                        float(m["grad_norm"]), not m.pop("nonfinite"))
                        examples_seen += sum(float(m.pop("examples")) for m in logged)
                        mean = {k: float(np.mean([m[k] for m in logged])) for k in logged[0]}
                        mean["learning_rate"] = float(schedule(step))
                        writer.write(step, mean, prefix="train")
                        writer.progress(step, mean)
                        pending = []
                jax.block_until_ready(state)
                logged = jax.device_get(pending)
                for i, m in enumerate(logged):  # steps since the last log
                    guard.check(step - len(logged) + 1 + i, float(m["loss"]),
                                float(m["grad_norm"]), not m["nonfinite"])
                examples_seen += sum(float(m["examples"]) for m in logged if "examples" in m)
                train_time += time.time() - start
                scores = evaluate_sets(task, state.params, data.eval_sets, eval_fn, config, mesh)
                for split, values in scores.items():
                    writer.write(step, values, prefix=split)
                main = scores[task.eval_splits[0]][task.selection_metric]
                writer.message(f"epoch {epoch + 1}: " + json.dumps(scores))
                if _keep(config.keep_checkpoint, kept, main, last=epoch + 1 == num_epochs):
                    # Host copies on every process (the parameters may span processes).
                    kept_params = multihost_utils.process_allgather(state.params, tiled=True)
                    guard.check_params(kept_params, f"{workdir}/{pretrained.BEST_DIR}")
                    kept = {"score": main, "epoch": epoch + 1, "metrics": scores}
                    if multihost.is_primary():
                        saved = {k: v for k, v in kept_params.items()
                                 if k not in self.objective.unsaved}
                        pretrained.save(paths.join(workdir, pretrained.BEST_DIR), bert_config,
                                        saved, tokenizer=tokenizer, task=spec, overwrite=True)
            if guard.summary():
                writer.message(f"done: {guard.summary()}")
            writer.close()
            results = {"task": task.name, "seed": seed, "learning_rate": config.learning_rate,
                       "num_train_epochs": config.num_train_epochs,
                       "global_batch_size": config.global_batch_size,
                       "keep_checkpoint": config.keep_checkpoint, "kept_epoch": kept["epoch"],
                       "selection_metric": task.selection_metric,
                       "selection_split": task.eval_splits[0], **kept["metrics"],
                       "frozen_steps": min(frozen_steps, step), "train_steps": step,
                       "train_seconds": round(train_time, 2),
                       "first_step_seconds": round(first_step_time or 0.0, 2),
                       "train_examples_per_second": round(examples_seen / max(train_time, 1e-9),
                                                          2),
                       "max_seq_length": config.max_seq_length,
                       "length_coverage": self.length_coverage}
            kept_params = jax.device_put(kept_params, shardings.params)
            results.update(predict_test(task, tokenizer, kept_params, eval_fn, config, mesh,
                                        workdir))
        if multihost.is_primary():
            paths.write_text(paths.join(workdir, pretrained.RESULTS_FILE),
                             json.dumps(results, indent=2))
        multihost.sync("finetune_results_written")
        return results


@dataclasses.dataclass
class _Prepared:
    """One data set's task, features and model, and the steps compiled for them."""

    task: Any
    train_features: list
    eval_sets: dict
    model: nn.Module
    objective: Objective
    _steps: dict = dataclasses.field(default_factory=dict)

    def steps(self, tx, shardings, mesh, rules, frozen: str = ""):
        """(train step, eval step), jitted once per set of `frozen` patterns: later runs
        pass states whose optimizer hyperparameters differ but whose structure and
        shardings are the same."""
        if frozen not in self._steps:
            loss_fn = functools.partial(self.objective.loss, model=self.model, task=self.task,
                                        rules=rules)
            step_fn = jax.jit(functools.partial(train_step, loss_fn=loss_fn, tx=tx),
                              in_shardings=(shardings, sharding.batch_sharding(mesh, rules),
                                            self.objective.extra_shardings),
                              out_shardings=(shardings, None), donate_argnums=0)
            self._steps[frozen] = (step_fn, make_eval_fn(self.model, self.task, rules,
                                                         shardings.params, mesh))
        return self._steps[frozen]


def _warn_if_uncovered(tokenizer, features: list, what: str) -> None:
    """Warns when the vocabulary turns much of the text into [UNK] (up to 1000 features)."""
    rows = []
    for feature in features[:1000]:
        ids = feature["input_ids"]  # a row, or one row per choice (multiple choice)
        rows += [np.asarray(r).reshape(-1) for r in
                 (ids if len(ids) and not np.isscalar(ids[0]) else [ids])]
    ids = np.concatenate(rows)
    special = np.isin(ids, [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id])
    warning = uncovered_text_warning(int((ids == tokenizer.unk_id).sum()),
                                     int((~special).sum()), what)
    if warning:
        log.warning(warning)


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
    return {k: paths.abspath(v) if (k.endswith("_file") or k == "tfds_data_dir")
            and isinstance(v, str) and v else v for k, v in values.items()}


def _keep(mode: str, kept: dict, score: float, last: bool) -> bool:
    """Whether this epoch's model replaces the kept one. "best": a strictly higher
    validation score (ties keep the earlier epoch); "last": the end of the schedule."""
    if mode == "last":
        return last
    return kept["epoch"] is None or score > kept["score"]


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
