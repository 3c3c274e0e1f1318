"""The one training loop that pretraining, fine-tuning and distillation run.

    loop = Loop(state, step_fn, place, num_steps=..., log=LogOptions(...), writer=...,
                guard=...)
    reason = loop.run(batches, actions, checkpoint=Every(n, save), watcher=..., stop=...)

Each step calls the jitted `step_fn(state, global batch, *step_args) -> (state, metrics)`
and then what is due at the new step, in the manner of clu's periodic actions:

- logging, built in: the pending steps' metrics are fetched at once, checked by the
  `train_loop.NonFiniteGuard`, averaged, joined by throughput (steps timed apart from the
  actions and from the first step, which compiles) and by the learning rate, which is
  derived here alone from the optimizer's schedule at its own update count (skipped
  non-finite steps do not advance it), then written and printed;
- `actions` (`Every`): evaluation, keeping the best model, unfreezing;
- the checkpoint (`Every`), also taken when the loop stops early, always after a flush,
  so no checkpoint follows an unchecked non-finite step;
- stopping: the last step, a preemption notice (`preemption.Watcher`) or Ctrl-C
  (`preemption.interrupt_request`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Iterator

import jax
import numpy as np

from bert_jax.errors import NonFiniteError

DONE, PREEMPTED, INTERRUPTED = "done", "preempted", "interrupted"


@dataclasses.dataclass
class Every:
    """`action(loop)` after every `every`-th step (0: never by count), and at other moments.

    Also after the last step with `at_end`, and whenever `when(loop)` holds (an epoch's end)."""

    every: int
    action: Callable[["Loop"], None]
    at_end: bool = True
    when: Callable[["Loop"], bool] | None = None

    def due(self, loop: "Loop") -> bool:
        return bool((self.every and loop.step % self.every == 0)
                    or (self.at_end and loop.is_last)
                    or (self.when is not None and self.when(loop)))


@dataclasses.dataclass(frozen=True)
class LogOptions:
    """What the loop logs, and how often.

    every: steps between log lines; learning_rate: the optimizer's schedule (update
    count -> rate); per_step: amounts each step processes, logged per second (e.g.
    {"tokens": B * L}); counted: metric names summed rather than averaged and logged per
    second (e.g. "examples" of varying batches); flops_per_step and peak_flops give
    `mfu`; progress: metric names printed on the progress line (None: all)."""

    every: int
    learning_rate: Callable[[int], Any]
    per_step: dict = dataclasses.field(default_factory=dict)
    counted: tuple = ()
    flops_per_step: float = 0.0
    peak_flops: float = 0.0
    progress: tuple | None = None


class Loop:
    """A training run from `state` (at `int(state.step)`) to `num_steps`.

    place: a host batch -> the step's global arrays; step_args: further step inputs
    (a teacher's parameters); log: what is logged (`LogOptions`) to `writer`; guard:
    the `NonFiniteGuard` of the logged steps; on_step: called after each step (a
    background save's error check).
    """

    def __init__(self, state, step_fn: Callable, place: Callable, *, num_steps: int,
                 log: LogOptions, writer, guard, step_args: tuple = (),
                 on_step: Callable[[], None] | None = None):
        self.state, self.step_fn, self.place, self.step_args = state, step_fn, place, step_args
        self.num_steps, self.log, self.writer, self.guard = num_steps, log, writer, guard
        self.on_step = on_step
        self.step = int(state.step)
        self.start_step = self.step
        # The optimizer's update count: steps minus the non-finite ones it skipped.
        self.updates = self.step - int(state.nonfinite_steps)
        self.pending: list = []
        self.last: dict = {}
        self.train_seconds = 0.0  # stepping time, first step and actions excluded
        self.first_step_seconds = 0.0
        self.totals = {name: 0.0 for name in log.counted}  # over the timed steps
        self._timer = None  # (start time, step) of the steps being timed
        self._logged_seconds = 0.0

    @property
    def is_last(self) -> bool:
        return self.step >= self.num_steps

    def run(self, batches: Iterator[dict], actions: tuple = (), *,
            checkpoint: Every | None = None, watcher=None, stop=None) -> str:
        """Steps until `num_steps` (or the end of `batches`) or a stop; returns why it ended.

        DONE, PREEMPTED (`watcher` said so; checkpointed) or INTERRUPTED
        (`stop`, Ctrl-C; checkpointed)."""
        reason = DONE
        while self.step < self.num_steps and reason == DONE:
            batch = next(batches, None)
            if batch is None:  # the data ended first (a fine-tuning epoch packed tighter)
                break
            self._one_step(batch)
            if self.step % self.log.every == 0 or self.is_last:
                self.flush()
            due = [action for action in actions if action.due(self)]
            if due:
                self._pause()  # the actions' time is not training time
            for action in due:
                action.action(self)
            if watcher is not None and watcher.reached(self.step) and not self.is_last:
                reason = PREEMPTED
            elif stop is not None and stop.requested and not self.is_last:
                reason = INTERRUPTED
            if checkpoint is not None and (checkpoint.due(self) or reason != DONE):
                self._pause()
                if self.pending:
                    self.flush()  # never checkpoint past an unchecked non-finite step
                checkpoint.action(self)
        self._pause()
        if self.pending:
            self.flush()
        return reason

    def _one_step(self, batch: dict) -> None:
        first = self._timer is None and self.step == self.start_step
        if self._timer is None:
            self._timer = (time.perf_counter(), self.step)
        self.state, metrics = self.step_fn(self.state, self.place(batch), *self.step_args)
        self.step += 1
        self.pending.append(metrics)
        if first:  # it may compile: kept out of the throughput
            jax.block_until_ready(self.state)
            self.first_step_seconds = time.perf_counter() - self._timer[0]
            self._timer = (time.perf_counter(), self.step)
        if self.on_step is not None:
            self.on_step()

    def _pause(self) -> None:
        """Ends the timed stretch of steps (before actions run)."""
        if self._timer is not None and self._timer[1] < self.step:
            jax.block_until_ready(self.state)
            self.train_seconds += time.perf_counter() - self._timer[0]
        self._timer = None

    def flush(self) -> dict:
        """Fetches, checks, averages and writes the pending steps' metrics."""
        self._pause()
        fetched = jax.device_get(self.pending)
        self.pending = []
        first = self.step - len(fetched)
        rates = []
        for i, m in enumerate(fetched):
            nonfinite = bool(m.pop("nonfinite"))
            self.guard.check(first + i + 1, float(m["loss"]), float(m["grad_norm"]),
                             not nonfinite)
            rates.append(float(self.log.learning_rate(self.updates)))
            self.updates += not nonfinite
        # The process's first step (it may compile) counts only in first_step_seconds.
        timed = [m for i, m in enumerate(fetched) if first + i != self.start_step]
        counts = {k: sum(float(m[k]) for m in timed) for k in self.log.counted}
        mean = {k: float(np.mean([m[k] for m in fetched])) for k in fetched[0]
                if k not in self.log.counted}
        mean["learning_rate"] = float(np.mean(rates))
        seconds = max(self.train_seconds - self._logged_seconds, 1e-9)
        self._logged_seconds = self.train_seconds
        for k, v in counts.items():
            self.totals[k] += v
        mean.update({f"{k}_per_second": v * len(timed) / seconds
                     for k, v in self.log.per_step.items()})
        mean.update({f"{k}_per_second": v / seconds for k, v in counts.items()})
        if self.log.flops_per_step and self.log.peak_flops:
            mean["mfu"] = self.log.flops_per_step * len(timed) / seconds / self.log.peak_flops
        mean["nonfinite_steps"] = float(self.step - self.updates)
        self.writer.write(self.step, mean, prefix="train")
        self.writer.progress(self.step, {k: v for k, v in mean.items()
                                         if self.log.progress is None
                                         or k in self.log.progress}, final=self.is_last)
        self.last = mean
        return mean


class NonFiniteGuard:
    """Watches the steps `apply_gradients` skipped.

    An isolated one (a bf16 overflow) is a warning line; `max_consecutive` in a row
    (1 with `stop_at_first`) mean the run diverged: `NonFiniteError` naming the step, its values and
    `levers` (what to change), raised before the caller saves anything, so the last checkpoint stays
    the latest."""

    def __init__(self, max_consecutive: int, *, stop_at_first: bool = False, levers: str,
                 log: logging.Logger):
        self.max_consecutive = 1 if stop_at_first else max_consecutive
        self.levers, self.log = levers, log
        self.skipped = 0  # this process's run so far (a resumed run counts from its start)
        self.consecutive = 0

    def check(self, step: int, loss: float, grad_norm: float, finite: bool) -> None:
        """One step's host values; raises NonFiniteError when the run diverged."""
        if finite:
            self.consecutive = 0
            return
        self.skipped += 1
        self.consecutive += 1
        values = f"loss {loss:.4g}, gradient norm {grad_norm:.4g}"
        if self.consecutive >= self.max_consecutive:
            raise NonFiniteError(
                f"step {step}: {values}: non-finite for {self.consecutive} step(s) in a row, "
                f"the run diverged; stopping before it saves anything more (the last "
                f"checkpoint is intact). Try {self.levers}")
        self.log.warning("step %d: %s; update skipped (%d skipped so far; %d in a row stop "
                         "the run)", step, values, self.skipped, self.max_consecutive)

    def check_params(self, params: Any, what: str) -> None:
        """Raises NonFiniteError when host `params` hold NaN/Inf (never saved as `what`)."""
        if not all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(params)):
            raise NonFiniteError(f"the parameters hold NaN or Inf values; not writing them as "
                                 f"{what}. Try {self.levers}")

    def summary(self) -> str:
        return f"{self.skipped} non-finite step(s) skipped" if self.skipped else ""
