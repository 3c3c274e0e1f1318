"""The wrapper every training command (`pretrain`, `finetune`, `distill`) runs its job in:
the preemption watcher (SIGTERM: a checkpoint at the next step, then exit
PREEMPTED_EXIT_CODE), the workdir lock, and the device's out-of-memory error reworded as
one line with what to change. Parsing and `multihost.initialize` stay with each command:
their flags differ."""

from __future__ import annotations

import sys
from typing import Any, Callable

from bert_jax.errors import is_out_of_memory, out_of_memory
from bert_jax.host import outputs, workdir_lock
from bert_jax.train import multihost, preemption


def run_job(command: str, workdir: str, kind: str, load: Callable[[], tuple[Any, dict]],
            job: Callable[[Any, str], Any]) -> tuple[int, Any]:
    """(exit code, result). `load()` -> (config, the run's inputs) runs under the watcher
    already (a SIGTERM while loading stops the run after its first step); `workdir` is
    then checked against the inputs, once (`outputs.check_workdir`), and `job(config,
    checked workdir)` runs under the lock of `workdir` (a `folders` `kind`); its loop
    finds the watcher with `preemption.active()`. A preempted job gives
    (PREEMPTED_EXIT_CODE, None)."""
    with preemption.Watcher():
        config, inputs = load()
        checked = outputs.check_workdir(workdir, kind, inputs)
        try:
            with workdir_lock.hold(checked, f"bert-jax {command}", multihost.is_primary(),
                                   kind=kind):
                return 0, job(config, checked)
        except preemption.Preempted as e:
            if multihost.is_primary():
                print(e, file=sys.stderr)
            return preemption.PREEMPTED_EXIT_CODE, None
        except Exception as e:  # noqa: BLE001 - only the out-of-memory error is reworded
            if is_out_of_memory(e):
                raise out_of_memory(batch_size=config.global_batch_size,
                                    seq_length=config.max_seq_length,
                                    grad_accum_steps=config.grad_accum_steps) from e
            raise
