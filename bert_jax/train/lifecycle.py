"""The lifecycle every training job runs.

Pretraining (`bert_jax.pretrain.job`), fine-tuning and distillation (`bert_jax.finetune.job`). A job
is a recipe (its objective, data and actions) over this one skeleton:

    job = Job(workdir, partitioner, keep=...)
    restored = job.restore(target, run)          # WORKDIR's checkpoint, or None
    job.open_metrics(total_steps, restored)      # metrics.jsonl from the restored step on
    state = restored.state if restored else ...  # the job's own fresh state
    loop = job.loop(config, state, step_fn, place, objective, num_steps=..., log_options=...)
    job.train(loop, batches, actions, checkpointing=Checkpointing(every=..., meta=...))

`train` runs the loop under the mesh, Ctrl-C and the preemption watcher, checkpoints on
its cadence and when stopped early, and closes the checkpoints and metrics; a stop
other than the last step becomes `Interrupted` or `preemption.Preempted`, raised after
the checkpoint is written.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterator

import jax

from bert_jax.errors import Interrupted
from bert_jax.host import folders, paths
from bert_jax.train import checkpoint, multihost, preemption, train_loop
from bert_jax.train.metrics_writer import MetricsWriter
from bert_jax.train.objective import Objective
from bert_jax.train.sharding import Partitioner

log = logging.getLogger("bert_jax.train.lifecycle")


def divergence_levers(warmup_key: str) -> str:
    """What to change when a run diverges (`train_loop.NonFiniteGuard`'s message)."""
    return (f"a lower --config.learning_rate, a longer warmup (--config.{warmup_key}), "
            "--config.compute_dtype=float32 instead of bfloat16, or gradient clipping "
            "(--config.max_grad_norm=1.0).")


@dataclasses.dataclass(frozen=True)
class Checkpointing:
    """When a run checkpoints and what each checkpoint writes.

    Every `every` steps (0: never by count), when `when(loop)` holds, at the last step and at any
    stop, the state with `meta(loop)` (JSON) beside it, after the save steps `beside` (each
    `step(loop)`, run by every process: what the checkpoint carries beside the state, such as the
    objective's `models_beside`)."""

    every: int
    meta: Callable[[train_loop.Loop], dict]
    when: Callable[[train_loop.Loop], bool] | None = None
    beside: tuple[Callable[[train_loop.Loop], None], ...] = ()


@dataclasses.dataclass
class Restored:
    """A checkpoint restored onto a run's target.

    Its state, meta (JSON) and step, and where it came from."""

    state: Any
    meta: dict
    step: int
    source: str


class Job:
    """One training run in `workdir`.

    Its checkpoints (the last `keep`) and, from `open_metrics` on, its metrics; `partitioner` holds
    the run's device mesh."""

    def __init__(self, workdir: str, partitioner: Partitioner, *, keep: int):
        self.workdir, self.partitioner, self.keep = paths.abspath(workdir), partitioner, keep
        self.ckpt = checkpoint.Checkpointer(self.workdir, keep=keep)
        self.writer: MetricsWriter | None = None

    def restore(self, target: Any, run: dict, *, start_fresh: bool = False,
                resume_from: str = "") -> Restored | None:
        """WORKDIR's latest checkpoint of `run` onto `target`, else `resume_from`'s, else None.

        `run`: a `checkpoint.run_description`; `target`: sharded ShapeDtypeStructs; `resume_from`:
        another run's checkpoint of the same state shapes. `start_fresh`: unreadable checkpoints
        mean starting over rather than an error."""
        restored = self.ckpt.restore(target, run=run, start_fresh=start_fresh)
        if restored is not None:
            return Restored(*restored, source=self.ckpt.directory)
        if resume_from:
            return Restored(*checkpoint.restore_from_path(resume_from, target),
                            source=resume_from)
        return None

    def start_over(self, earlier: list[str]) -> str | None:
        """Moves an earlier run's outputs into WORKDIR/previous/ and opens empty checkpoints.

        `earlier`: names in WORKDIR, its checkpoints among them (moved by `folders.set_aside`).
        Returns where they went (None: there was nothing)."""
        self.ckpt.close()
        aside = None
        if multihost.is_primary():
            aside = folders.set_aside(self.workdir, earlier)
            paths.rmtree(self.ckpt.directory, missing_ok=True)  # left only in a bucket
        multihost.sync("checkpoints_removed")
        self.ckpt = checkpoint.Checkpointer(self.workdir, keep=self.keep)
        return aside

    def open_metrics(self, total_steps: int, restored: Restored | None, *,
                     append: bool = True) -> MetricsWriter:
        """The run's MetricsWriter.

        A resumed run's log keeps the steps up to its checkpoint's (they are replayed), a fresh
        run's none (`append=False`: the log starts over, TensorBoard's too)."""
        self.writer = MetricsWriter(self.workdir, total_steps=total_steps, append=append)
        self.writer.drop_after(restored.step if restored else 0)
        if restored is not None:
            self.writer.message(f"resumed from step {restored.step} of {restored.source}")
        return self.writer

    def loop(self, config, state, step_fn: Callable, place: Callable, objective: Objective, *,
             num_steps: int, log_options: train_loop.LogOptions,
             warmup_key: str) -> train_loop.Loop:
        """The training loop from `state` with the jitted `step_fn` of `objective`.

        The step is given its `extra` input, if any, at every step. The loop has the run's
        non-finite policy (`on_nonfinite`, `max_consecutive_nonfinite`; `warmup_key` names the
        warmup in its message), what it logs (`log_options`) and the save-error check."""
        guard = train_loop.NonFiniteGuard(config.max_consecutive_nonfinite,
                                          stop_at_first=config.on_nonfinite == "stop",
                                          levers=divergence_levers(warmup_key), log=log)
        return train_loop.Loop(state, step_fn, place, num_steps=num_steps, log=log_options,
                               writer=self.writer, guard=guard, on_step=self.ckpt.check,
                               step_args=() if objective.extra is None else (objective.extra,))

    def train(self, loop: train_loop.Loop, batches: Iterator[dict], actions=(), *,
              checkpointing: Checkpointing) -> None:
        """Runs `loop` to its last step or a stop, then closes the checkpoints and metrics.

        It checkpoints as `checkpointing` says (and at any stop). Raises Interrupted (Ctrl-C) or
        preemption.Preempted (SIGTERM) once the stop's checkpoint is written."""
        def save(loop: train_loop.Loop) -> None:
            for step in checkpointing.beside:
                step(loop)
            self.ckpt.save(loop.step, loop.state, checkpointing.meta(loop))
        save = train_loop.Every(checkpointing.every, save, when=checkpointing.when)
        with jax.set_mesh(self.partitioner.mesh), preemption.interrupt_request(log) as stop, \
                self.ckpt.saves_finished():
            reason = loop.run(batches, actions, checkpoint=save, watcher=preemption.active(),
                              stop=stop)
            self.ckpt.wait()
        self.ckpt.close()
        if reason == train_loop.DONE and loop.guard.summary():
            self.writer.message(f"done: {loop.guard.summary()}")
        self.writer.close()
        if reason == train_loop.INTERRUPTED:
            raise Interrupted(f"interrupted at step {loop.step}: checkpoint {loop.step} saved "
                              f"in {self.ckpt.directory}; the same command resumes from it")
        if reason == train_loop.PREEMPTED:
            raise preemption.Preempted(loop.step)

    def close(self) -> None:
        """Closes what is open (a run that ends without training)."""
        self.ckpt.close()
        if self.writer is not None:
            self.writer.close()
