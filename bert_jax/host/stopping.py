"""SIGTERM stops a command as Ctrl-C does.

`stop_on_signals` turns it into `bert_jax.errors.Interrupted` in the main thread, so the command's
`finally` blocks end its workers and remove its temporary files, and `bert-jax` prints one line and
exits with 130. (pretrain, finetune and distill checkpoint first: `train/preemption.py`.) The
`bert-jax` CLI opens it around every command (`bert_jax.cli.main`), before JAX starts its backends:
libtpu, loaded then even on a machine without a TPU, installs a crash handler (a stack dump,
`*** SIGTERM received by PID ...`, then death by the signal) only where SIGTERM has no handler yet.
`jax.distributed`'s preemption notice (multi-process runs) replaces ours, as it must."""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
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


class ProcessEnd:
    """Ends a command's process promptly with the command's exit code, whatever stop comes.

    For a command that is its process's whole life (`bert-jax ...`). Built before JAX is
    imported, so that its exit handler runs after every library's (they run in reverse order):
    Python's exit handlers and the command's files are done by then; what it skips is the
    libraries' C++ teardown (XLA's and tensorstore's thread pools, a second or more), during which
    Python's signal handlers are gone and Ctrl-C would kill the process by the signal. A Ctrl-C or
    SIGTERM after the command's end, while Python still runs, ends it at once likewise."""

    def __init__(self):
        self.code = 1  # until `ended` says otherwise: an exception let through (`--debug`)
        atexit.register(self._exit)

    def ended(self, code: int) -> None:
        """Records the command's exit code; from now on a stop ends the process with it."""
        self.code = code
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda signum, frame: self._exit())

    def _exit(self) -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing to keep
                stream.flush()
        os._exit(self.code)
