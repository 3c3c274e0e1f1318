"""SIGTERM stops a command as Ctrl-C does.

`stop_on_signals` turns it into `bert_jax.errors.Interrupted` in the main thread, so the command's
`finally` blocks end its workers and remove its temporary files, and `bert-jax` prints one line and
exits with 130. (pretrain, finetune and distill checkpoint first: `train/preemption.py`.) The
`bert-jax` CLI opens it around every command (`bert_jax.cli.main`), before JAX starts its backends:
libtpu, loaded then even on a machine without a TPU, installs a crash handler (a stack dump,
`*** SIGTERM received by PID ...`, then death by the signal) only where SIGTERM has no handler yet.
`jax.distributed`'s preemption notice (multi-process runs) replaces ours, as it must."""
from __future__ import annotations

import contextlib
import signal
import threading

from bert_jax.errors import Interrupted


@contextlib.contextmanager
def stop_on_signals(command: str):
    """Within the block, SIGTERM raises Interrupted (SIGINT raises KeyboardInterrupt as always).

    On leaving, the previous handler comes back if ours is still in place: after a stop (ours or a
    preempted run's, `train/preemption.py`) SIGTERM stays ignored, so that a repeated one cannot
    kill the exiting process. A no-op off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup
        raise Interrupted(f"stopped by SIGTERM; {command}'s temporary files were removed")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is stop:
            signal.signal(signal.SIGTERM, previous)



@contextlib.contextmanager
def deferred_stops():
    """Within the block, Ctrl-C and SIGTERM wait: the block runs to its end, then the stop comes.

    For writes whose writer threads a stop cannot end (Orbax's, tensorstore's): stopped midway, they
    would go on filling the temporary folder that the stop's cleanup removes. A no-op off the main
    thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived = []

    def wait(signum, frame):
        arrived.append(signum)

    previous = {s: signal.signal(s, wait) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if arrived:  # now to the handler in place before
        signal.raise_signal(arrived[0])
