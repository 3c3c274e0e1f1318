"""Preemption: SIGTERM (what spot/preemptible TPU VMs and Kubernetes send before eviction)
asks a run to stop at a step boundary that every process agrees on, save a checkpoint
there and exit 0; rerunning the same command resumes from it exactly.

One process: a SIGTERM handler sets a flag, read at the next step boundary; further
SIGTERMs while the checkpoint is written are ignored (the save completes; earlier
checkpoints are never touched). Several processes (jax.distributed): jax's preemption
service catches SIGTERM on any process and the processes agree on the next common step
(`multihost_utils.reached_preemption_sync_point`, called at every step).

A command opens one `Watcher` around its work; library code deeper down (fine-tuning
runs inside a grid) finds it with `active()`.
"""

from __future__ import annotations

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


class Watcher:
    """Watches for a preemption notice; `reached(step)` at each step boundary (every
    process, every step) says whether to checkpoint and stop there. Created early (a
    SIGTERM during start-up stops the run after its first step); a context manager
    that restores the previous SIGTERM handler on exit.
    handle_sigterm=False: only multi-process notices count (for in-process callers)."""

    def __init__(self, handle_sigterm: bool = True):
        self.requested = False
        self._previous = None
        self._distributed = jax.process_count() > 1
        if (handle_sigterm and not self._distributed
                and threading.current_thread() is threading.main_thread()):
            self._previous = signal.signal(signal.SIGTERM, self._notice)

    def _notice(self, signum, frame) -> None:
        self.requested = True

    def reached(self, step: int) -> bool:
        if self._distributed:
            return multihost_utils.reached_preemption_sync_point(step)
        return self.requested

    def close(self) -> None:
        """Restores the previous SIGTERM handler; after a notice, keeps ignoring SIGTERM
        instead (the process is exiting: a repeated notice must not turn exit 0 into a
        death by signal)."""
        if self._previous is not None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN if self.requested else self._previous)
            self._previous = None

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
    """The watcher the running command opened (`with Watcher():`), else one that consults
    only multi-process preemption notices."""
    return _active or Watcher(handle_sigterm=False)
