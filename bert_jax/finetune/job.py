"""The fine-tuning job, a recipe over the shared skeleton (`bert_jax.train.lifecycle`).

The encoder (`model_source`) with a fresh task head, the task's data (`task_data`), the objective
and its compiled steps (`objective`), the schedule and freezing (`schedule`), evaluation after every
epoch with the best (or the last) model kept in `WORKDIR/best/` (`keeping`), then the test splits'
predictions and the final metrics in `WORKDIR/eval_results.json`. Distillation is the same job with
another objective (`bert_jax.finetune.distill`).

In a multi-process job every process reads and batches the (small) fine-tuning data
alike and places its own devices' rows; eval outputs are replicated so every process
sees them all, and process 0 writes the files. Running the kept model afterwards
(`load_finetuned`) is `bert_jax.finetune.inference`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import jax

from bert_jax.data import lengths
from bert_jax.errors import UserError
from bert_jax.finetune import inference, keeping, model_source, schedule, task_data, tasks
from bert_jax.finetune.objective import TaskObjective, compiled_steps
from bert_jax.host import paths
from bert_jax.host.folders import FINETUNING_WORKDIR
from bert_jax.models.config import check_inputs_fit
from bert_jax.train import checkpoint, lifecycle, multihost, optim, sharding, train_loop
from bert_jax.train.run_config import derive
from bert_jax.train.train_state import StatePlan

log = logging.getLogger("bert_jax.finetune")

KEEP_CHECKPOINTS = 2  # training checkpoints kept for resuming (removed when the run ends)


def finetune(config, workdir: str) -> dict[str, Any]:
    """Fine-tunes with one seed (`config.seed`); returns what eval_results.json holds."""
    session = Finetuning(config)
    return session.run(session.config, workdir)


class Finetuning:
    """Fine-tuning runs of one task on one model that share the tokenized data and compiled steps.

    `run(config, workdir)` for each learning rate, epoch count, batch size or seed. `objective`
    replaces the task loss (distillation), `source` the encoder `resolve_model` would pick. The
    optimizer keeps its learning rate and schedule in its state
    (`optim.make_optimizer(injected=True)`), so such runs reuse one compiled train step
    (one per batch shape). The task is built and the training split read once; `self.config` is
    `config` with max_seq_length="auto" resolved from that split
    (`task_data.resolve_max_seq_length`). Data is featurized once, or once per seed when
    `max_train_examples`/`max_eval_examples` draw a seed-dependent subset."""

    def __init__(self, config, objective: TaskObjective | None = None,
                 source: model_source.ModelSource | None = None):
        schedule.check_finetuning_config(config)
        self.objective = objective or TaskObjective()
        self.source = source or model_source.resolve_model(config)
        task = tasks.get_task(config)
        if config.packing and not task.supports_packing:  # before any data is read
            raise UserError(f"task {task.name!r} does not support packing"
                            + (" with a CRF" if config.crf else ""))
        self.training = task_data.TrainingSplit.read(task, lambda: tasks.get_task(self.config))
        train_lengths = task_data.untruncated_lengths(task, self.training.examples,
                                                      self.source.tokenizer)
        self.config = task_data.resolve_max_seq_length(config, train_lengths,
                                                       self.source.config.max_positions)
        self.length_coverage = task_data.length_coverage(
            train_lengths, self.config.max_seq_length, auto=config.max_seq_length == "auto")
        check_inputs_fit(self.source.config, self.source.origin,
                         max_seq_length=self.config.max_seq_length)
        self.partitioner = sharding.Partitioner.from_config(config)
        self._prepared: dict[Any, task_data.TaskData] = {}

    def prepared(self, seed: int) -> task_data.TaskData:
        """The task's data for `seed`.

        Read once, or once per seed when `max_train_examples`/`max_eval_examples` draw a
        seed-dependent subset."""
        config = self.config
        key = seed if config.max_train_examples or config.max_eval_examples else None
        if key not in self._prepared:
            self._prepared[key] = task_data.prepare(self.training, self.source,
                                                    task_data.DataSettings.of(config), seed,
                                                    self.objective.wrap_model)
        return self._prepared[key]

    def run(self, config, workdir: str) -> dict[str, Any]:
        """One run with `config`'s seed and optimisation settings.

        Its data, model and numerics settings must be the session's. Resumes from WORKDIR's
        checkpoint of the same run when an earlier one was interrupted; raises preemption.Preempted
        after checkpointing when the command's watcher (`preemption.active`) says so."""
        if config is not self.config:  # a grid's run (the session's is checked already)
            schedule.check_finetuning_config(config)
            config = self.resolved(config)
        batching = schedule.Batching.of(config)
        multiple = batching.rows_multiple(self.partitioner.batch_shards)  # before any data
        data = self.prepared(int(config.seed))
        plan = schedule.Plan.of(batching, schedule.Optimization.of(config), data, multiple)
        run = checkpoint.run_description(config.to_dict(), self.source.config.to_dict(),
                                         self.source.tokenizer.fingerprint())
        job = lifecycle.Job(workdir, self.partitioner, keep=KEEP_CHECKPOINTS)
        state, shardings, kept = self._start(job, config, data, plan, run)
        frozen = plan.frozen_at(int(state.step))
        step_fn, eval_fn = compiled_steps(data, self.objective,
                                          plan.tx if frozen else plan.full_tx, shardings,
                                          self.partitioner, config.freeze if frozen else "",
                                          config.grad_accum_steps)
        batches = schedule.EpochBatches(lambda epoch: plan.train_batches(
            data.task, data.train_features, epoch, int(config.seed)), plan.num_epochs,
            skip=int(state.step))
        loop = job.loop(config, state, step_fn, self.partitioner.shard_full_batch,
                        self.objective, num_steps=plan.num_steps, warmup_key="warmup_proportion",
                        log_options=train_loop.LogOptions(config.log_every_steps, plan.schedule,
                                                          counted=("examples",)))
        epoch_end = lambda loop: batches.epoch_ended or loop.is_last
        unfreeze = schedule.unfreezer(data, plan, self.objective, self.partitioner,
                                      config.rng_impl)
        keep = keeping.keeper(config, workdir, data, eval_fn, batches, kept, plan, self.source,
                              self.partitioner, self.objective.unsaved)
        actions = [train_loop.Every(0, unfreeze, at_end=False,
                                    when=lambda loop: loop.step == plan.frozen_steps),
                   train_loop.Every(0, keep, when=epoch_end)]
        job.train(loop, batches, actions, checkpointing=lifecycle.Checkpointing(
            config.checkpoint_every_steps, lambda loop: {**run, "kept": kept.summary()},
            when=epoch_end))
        with jax.set_mesh(self.partitioner.mesh):
            results = keeping.run_results(config, data.task, plan, loop, kept,
                                          self.length_coverage)
            kept_params = kept.params_or_saved(workdir, loop.state, self.objective.unsaved)
            results.update(inference.predict_test(data.task, data.test_sets,
                                                  self.source.tokenizer, kept_params,
                                                  eval_fn, inference.EvalBatching.of(config),
                                                  self.partitioner, workdir))
        if multihost.is_primary():
            paths.write_text(paths.join(workdir, FINETUNING_WORKDIR.results),
                             json.dumps(results, indent=2))
            paths.rmtree(job.ckpt.directory, missing_ok=True)  # the run is complete
        multihost.sync("finetune_results_written")
        return results

    def resolved(self, config):
        """`config` (a grid's run of this session) with the "auto" values the session resolved.

        Resolved by `task_data.resolve_max_seq_length`: a copy, or `config` itself."""
        if config.max_seq_length != "auto":
            return config
        return derive(config, max_seq_length=self.config.max_seq_length)

    def _start(self, job: lifecycle.Job, config, data, plan, run):
        """(state, shardings, Kept): WORKDIR's checkpoint of this run, or a fresh state.

        The fresh state has the encoder's weights (an earlier run's outputs and checkpoints are
        moved aside). Opens the run's metrics."""
        tx = plan.tx if plan.frozen_at(job.ckpt.latest_step() or 0) else plan.full_tx
        state_plan = StatePlan.build(plan.init_fn, tx, self.partitioner, config.rng_impl)
        target, shardings = state_plan.abstract, state_plan.shardings
        try:
            restored = job.restore(target, run, start_fresh=True)
        except checkpoint.IncompatibleCheckpointError as e:
            log.warning("%s: starting over", e)
            restored = None
        aside = job.start_over(FINETUNING_WORKDIR.earlier_run) if restored is None else None
        kept = keeping.Kept(**restored.meta["kept"]) if restored else keeping.Kept(aside=aside)
        if kept.epoch is not None:  # a resumed run's own, from a stop as it finished
            inference.remove_outputs(job.workdir)
        writer = job.open_metrics(plan.num_steps, restored, append=restored is not None)
        if restored is not None:
            # The saved rate and schedule give way to this run's (a resume may change them).
            state = restored.state.replace(opt_state=optim.set_hyperparams(
                restored.state.opt_state, **plan.hyperparams))
            return state, shardings, kept
        if aside:
            writer.message(f"{job.workdir} holds an earlier fine-tuning run: its logs are "
                           f"moved to {aside}; its model and results stay until this run "
                           "keeps its first model, then join them")
        elif writer.replaced_earlier_run:
            writer.message(f"{job.workdir} held an earlier fine-tuning run: its metrics, best "
                           "model and results are replaced")
        fresh_tx = plan.tx if plan.frozen_steps else plan.full_tx
        if fresh_tx is not tx:  # WORKDIR's checkpoint was another run's, past its unfreezing
            state_plan = StatePlan.build(plan.init_fn, fresh_tx, self.partitioner,
                                         config.rng_impl)
        state, shardings = state_plan.create(int(config.seed)), state_plan.shardings
        state = state.replace(params=self.source.init_params(state.params, shardings.params))
        writer.message(f"{self.objective.describe} {data.task.name} from {self.source.origin}: "
                       f"{len(data.train_features)} train features, {plan.steps_per_epoch} "
                       f"steps/epoch, {plan.num_steps} steps, lr {config.learning_rate:g}"
                       + (f", packed {plan.rows_per_batch} rows/batch" if config.packing else ""))
        writer.message(lengths.describe_coverage(self.length_coverage, "train examples")
                       + (" (max_seq_length=auto)" if self.length_coverage["auto"] else ""))
        return state, shardings, kept
