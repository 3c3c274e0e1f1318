"""The model a fine-tuning run keeps in WORKDIR/best, and what the finished run reports.

The kept model is the best validation score's or the last epoch's (`keep_checkpoint`), chosen by the
epoch-end action (`keeper`) that evaluates the model on the validation splits; the report is
`run_results`.

A fresh run in the workdir of a finished one leaves the earlier model and results in
place until it keeps its first model, then moves them to WORKDIR/previous/ (beside the
earlier logs, which it moved when it started): a run stopped before that leaves the
earlier model usable where it was."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jax
from jax.experimental import multihost_utils

from bert_jax.finetune.inference import EvalBatching, evaluate_sets, remove_outputs
from bert_jax.host import folders, paths
from bert_jax.host.folders import FINETUNING_WORKDIR
from bert_jax.train import multihost
from bert_jax.weights import pretrained


@dataclasses.dataclass
class Kept:
    """The model kept in WORKDIR/best: its validation score, epoch and metrics.

    The epoch is 1-based (None before the first evaluation). Also its parameters while this process
    has them; `aside`: where an earlier run's files went (WORKDIR/previous/TIME), for its results to
    join them at the first keep."""

    score: float | None = None
    epoch: int | None = None
    metrics: dict | None = None
    params: Any = dataclasses.field(default=None, repr=False)
    aside: str | None = None

    def update(self, score, epoch, metrics, params) -> None:
        self.score, self.epoch, self.metrics, self.params = float(score), epoch, metrics, params

    def summary(self) -> dict:
        """What a checkpoint records (JSON)."""
        return json.loads(json.dumps({"score": self.score, "epoch": self.epoch,
                                      "metrics": self.metrics, "aside": self.aside},
                                     default=float))

    def params_or_saved(self, workdir, state, unsaved: tuple):
        """The kept parameters placed like `state.params`.

        This process's copy, or (a run resumed after keeping them) WORKDIR/best's, with the
        `unsaved` ones of `state`."""
        shardings = jax.tree.map(lambda x: x.sharding, state.params)
        if self.params is not None:
            return jax.device_put(self.params, shardings)
        saved = pretrained.read_model_dir(paths.join(workdir, FINETUNING_WORKDIR.best)).params
        target = {k: v for k, v in state.params.items() if k not in unsaved}
        params = pretrained.init_params(target, saved, {k: shardings[k] for k in target},
                                        source=f"{workdir}/{FINETUNING_WORKDIR.best}")
        return {**params, **{k: state.params[k] for k in unsaved if k in state.params}}


def set_aside_earlier_results(workdir: str, kept: Kept) -> str | None:
    """Moves an earlier run's results aside before this run's first kept model.

    Before the first kept model (`kept.epoch` None), moves an earlier run's results
    (`FINETUNING_WORKDIR.earlier_results`) into `kept.aside` (or a new WORKDIR/previous/TIME);
    returns where, or None when there was nothing."""
    if kept.epoch is not None:
        return None
    if paths.is_remote(workdir):  # a bucket cannot move them: they would pass for this run's
        remove_outputs(workdir)
        return None
    aside = folders.set_aside(workdir, FINETUNING_WORKDIR.earlier_results, into=kept.aside)
    kept.aside = aside or kept.aside
    return aside


def should_keep(mode: str, kept: Kept, score: float, last: bool) -> bool:
    """Whether this epoch's model replaces the kept one.

    "best": a strictly higher validation score (ties keep the earlier epoch); "last": the end of the
    schedule."""
    if mode == "last":
        return last
    return kept.epoch is None or score > kept.score


def keeper(config, workdir: str, data, eval_fn, batches, kept: Kept, plan, source, partitioner,
           unsaved: tuple):
    """The epoch-end action of a run: evaluate, log, and keep the model in WORKDIR/best.

    The run is on `data` (its task and eval sets) from `source` (the encoder's config and
    tokenizer). The model is kept (without the `unsaved` parameters) when `config.keep_checkpoint`
    says so, and recorded in `kept`."""
    task, bert_config = data.task, source.config
    spec = {**task.spec(), "config": absolute_paths(config.to_dict()),
            "max_seq_length": config.max_seq_length}

    def keep(loop):
        scores = evaluate_sets(task, loop.state.params, data.eval_sets, eval_fn,
                               EvalBatching.of(config), partitioner)
        for split, values in scores.items():
            loop.writer.write(loop.step, values, prefix=split)
        main = scores[task.eval_splits[0]][task.selection_metric]
        loop.writer.message(f"epoch {batches.epoch + 1}: " + json.dumps(scores))
        last = loop.is_last or batches.epoch + 1 == plan.num_epochs
        if not should_keep(config.keep_checkpoint, kept, main, last=last):
            return
        # Host copies on every process (the parameters may span processes).
        params = multihost_utils.process_allgather(loop.state.params, tiled=True)
        loop.guard.check_params(params, f"{workdir}/{FINETUNING_WORKDIR.best}")
        if multihost.is_primary():
            aside = set_aside_earlier_results(workdir, kept)
            if aside:
                loop.writer.message(f"{workdir} held an earlier fine-tuning run: its results "
                                    f"are moved to {aside}")
        kept.update(main, batches.epoch + 1, scores, params)
        if multihost.is_primary():
            saved = {k: v for k, v in params.items() if k not in unsaved}
            pretrained.save(paths.join(workdir, FINETUNING_WORKDIR.best), bert_config, saved,
                            tokenizer=source.tokenizer, task=spec, overwrite=True)
    return keep


def run_results(config, task, plan, loop, kept: Kept, length_coverage: dict) -> dict[str, Any]:
    """What a finished run reports (WORKDIR/eval_results.json, before the test splits' metrics).

    Its settings, the kept model's epoch and validation metrics, and its speed."""
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
            "length_coverage": length_coverage}


def absolute_paths(values: dict) -> dict:
    """The config with its data paths absolute.

    So a saved model finds its files from any working directory."""
    return {k: paths.abspath(v) if (k.endswith("_file") or k in ("tfds_data_dir", "glue_dir"))
            and isinstance(v, str) and v else v for k, v in values.items()}
