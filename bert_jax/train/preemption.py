"""Preemption: SIGTERM asks a run to stop at a step boundary, save a checkpoint and exit 0.

SIGTERM is what spot/preemptible TPU VMs and Kubernetes send before eviction; every process agrees
on the step boundary; rerunning the same command resumes from the checkpoint exactly.

One process: a SIGTERM handler sets a flag, read at the next step boundary; further
SIGTERMs while the checkpoint is written are ignored (the save completes; earlier
checkpoints are never touched). Several processes (jax.distributed): jax's preemption
service catches SIGTERM on any process and the processes agree on the next common step
(`multihost_utils.reached_preemption_sync_point`, called at every step).

A command opens one `Watcher` around its work; library code deeper down (fine-tuning
runs inside a grid) finds it with `active()`. Ctrl-C is the same kind of request
(`StopSignal`, `interrupt_request`), but stops the run with exit code 130.
"""

from __future__ import annotations

import logging
import signal
import threading

import jax
from jax.experimental import multihost_utils

PREEMPTED_EXIT_CODE = 0


def message(step: int) -> str:
    """The line a preempted run prints."""
    return f"preempted at step {step}; checkpoint saved; rerun the same command to resume"


class Preempted(Exception):
    """A run stopped by SIGTERM after saving the checkpoint of `step`."""

    def __init__(self, step: int):
        super().__init__(message(step))
        self.step = step


class StopSignal:
    """From `start()` to `close()`, signal `signum` sets `requested` instead of its default action.

    So the loop stops at the next step boundary with a checkpoint; `log` gets `message` then. Only
    in the main thread of a one-process run: signals reach the main thread, and a multi-process
    run's stop must be agreed (`Watcher`). A repeated signal raises KeyboardInterrupt
    (`repeat="raise"`: stop at once) or is ignored (`repeat="ignore"`), also after `close()` once
    requested: the process is exiting, and a repeated notice must not turn its exit 0 into a death
    by signal."""

    def __init__(self, signum: int, *, repeat: str = "ignore",
                 log: logging.Logger | None = None, message: str = ""):
        self.signum, self.repeat, self.log, self.message = signum, repeat, log, message
        self.requested = False
        self._previous = None

    def start(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread() and jax.process_count() == 1:
            self._previous = signal.signal(self.signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested and self.repeat == "raise":
            raise KeyboardInterrupt
        if not self.requested and self.log is not None and self.message:
            self.log.warning(self.message)
        self.requested = True

    def close(self) -> None:
        """Restores the previous handler.

        It ignores the signal after a request unless repeat="raise"."""
        if self._previous is not None:
            ignore = self.requested and self.repeat == "ignore"
            signal.signal(self.signum, signal.SIG_IGN if ignore else self._previous)
            self._previous = None

    __enter__ = start

    def __exit__(self, *exc) -> None:
        self.close()


def interrupt_request(log: logging.Logger) -> StopSignal:
    """Ctrl-C (SIGINT) as a request to stop after this step with a checkpoint.

    A second Ctrl-C interrupts at once (in a multi-process run Ctrl-C always stops at once, the last
    checkpoint kept: every process must join a save)."""
    return StopSignal(signal.SIGINT, repeat="raise", log=log, message=(
        "Ctrl-C: stopping after this step with a checkpoint (Ctrl-C again to stop at once)"))


class Watcher:
    """Watches for a preemption notice.

    `reached(step)` at each step boundary (every process, every step) says whether to checkpoint and
    stop there. Created early (a SIGTERM during start-up stops the run after its first step); a
    context manager that restores the previous SIGTERM handler on exit. handle_sigterm=False: only
    multi-process notices count (for in-process callers)."""

    def __init__(self, handle_sigterm: bool = True):
        self._distributed = jax.process_count() > 1
        self._sigterm = StopSignal(signal.SIGTERM)
        if handle_sigterm:
            self._sigterm.start()

    @property
    def requested(self) -> bool:
        return self._sigterm.requested

    def reached(self, step: int) -> bool:
        if self._distributed:
            return multihost_utils.reached_preemption_sync_point(step)
        return self.requested

    def close(self) -> None:
        self._sigterm.close()

    def __enter__(self) -> "Watcher":
        global _active
        self._outer, _active = _active, self
        return self

    def __exit__(self, *exc) -> None:
        global _active
        self.close()
        _active = self._outer


_active: Watcher | None = None


def active() -> Watcher:
    """The watcher the running command opened (`with Watcher():`), else a stand-in.

    The stand-in consults only multi-process preemption notices."""
    return _active or Watcher(handle_sigterm=False)
