"""Training metrics: a live progress line, TensorBoard events and `metrics.jsonl`.

Only process 0 writes (every process may call; the others do nothing), so
multi-host runs produce one log. Reusable by any loop:

    writer = MetricsWriter(workdir, total_steps=1000)
    writer.write(step, {"loss": 2.3, "learning_rate": 1e-4}, prefix="train")
    writer.progress(step, {"loss": 2.3})      # one updating terminal line
    writer.close()
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import sys
import time
from typing import Mapping

import jax
import numpy as np

from bert_jax.data import tfrecord
from bert_jax.host import paths
from bert_jax.host.folders import TRAINING_WORKDIR
from bert_jax.train import event_proto

_EVENT_FILES = itertools.count()


class _EventFile:
    """A TensorBoard event file written through `bert_jax.host.paths`, so it may lie in a bucket.

    TFRecords of `Event` protos (`event_proto`, no TensorFlow), as tf.summary writes them."""

    def __init__(self, directory: str):
        paths.makedirs(directory)
        now = time.time()
        name = (f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}."
                f"{next(_EVENT_FILES)}.v2")
        self._file = paths.Appender(paths.join(directory, name), binary=True)
        self._file.write(tfrecord.frame(event_proto.file_version_event(now)))

    def scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """One event per scalar, as `tf.summary.scalar` records it."""
        now = time.time()
        for name, value in scalars.items():
            self._file.write(tfrecord.frame(event_proto.scalar_event(now, step, name, value)))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _format(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value}"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3g}"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"


def _step_of(line: str) -> int | None:
    """The step of one metrics.jsonl line; None for a line cut short by a killed run."""
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class MetricsWriter:
    """Writes scalars to WORKDIR/metrics.jsonl and TensorBoard event files; shows progress.

    metrics.jsonl gets one JSON object per write; the event files lie under
    WORKDIR/tensorboard/{prefix}."""

    def __init__(self, workdir: str, *, total_steps: int | None = None,
                 tensorboard: bool = True, stream=None, append: bool = True):
        """Opens the writer; `append=False` starts the log over.

        That is for runs that restart rather than resume (fine-tuning), so the workdir's curves are
        those of the run it holds."""
        self.enabled = jax.process_index() == 0
        self.total_steps = total_steps
        self.stream = stream or sys.stderr
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._jsonl = None
        self._tb = {}
        self._tensorboard = tensorboard
        self.workdir = workdir
        self._start = None  # (time, step) of the first progress call
        self.replaced_earlier_run = False
        if self.enabled:
            paths.makedirs(workdir)
            path = paths.join(workdir, TRAINING_WORKDIR.metrics)
            if not append:
                self.replaced_earlier_run = paths.exists(path)
                paths.rmtree(paths.join(workdir, TRAINING_WORKDIR.tensorboard), missing_ok=True)
                paths.write_text(path, "")
            self._jsonl = paths.Appender(path)

    def drop_after(self, step: int) -> None:
        """Removes the records of steps after `step` from metrics.jsonl.

        A run resumed from an earlier checkpoint replays them, and each step is logged once."""
        if not self.enabled:
            return
        self._jsonl.close()
        path = paths.join(self.workdir, TRAINING_WORKDIR.metrics)
        kept = [line for line in paths.read_text(path).splitlines(keepends=True)
                if _step_of(line) is not None and _step_of(line) <= step]
        with paths.replacing(path) as f:
            f.writelines(kept)
        self._jsonl = paths.Appender(path)

    def last(self, prefix: str) -> dict[str, float]:
        """The latest value of each `{prefix}/NAME` in metrics.jsonl.

        What a completed run, run again, returns."""
        path = paths.join(self.workdir, TRAINING_WORKDIR.metrics)
        values = {}
        for line in paths.read_text(path).splitlines() if paths.exists(path) else ():
            if _step_of(line) is not None:
                values.update({k.split("/", 1)[1]: v for k, v in json.loads(line).items()
                               if k.startswith(prefix + "/")})
        return values

    def _event_file(self, prefix: str) -> _EventFile:
        if prefix not in self._tb:
            self._tb[prefix] = _EventFile(paths.join(self.workdir, TRAINING_WORKDIR.tensorboard,
                                                     prefix))
        return self._tb[prefix]

    def write(self, step: int, metrics: Mapping[str, float], prefix: str = "train") -> None:
        """Records scalars for `step` as `{prefix}/{name}`."""
        if not self.enabled:
            return
        scalars = {k: float(np.asarray(v)) for k, v in metrics.items()}
        record = {"step": int(step), "time": time.time(),
                  **{f"{prefix}/{k}": v for k, v in scalars.items()}}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        if self._tensorboard:
            self._event_file(prefix).scalars(int(step), scalars)

    def progress(self, step: int, metrics: Mapping[str, float], *, final: bool = False) -> str:
        """Prints `step/total | name value ... | ETA`.

        One updating line on a terminal, one line per call otherwise. Returns the line."""
        now = time.time()
        if self._start is None:
            self._start = (now, step)
        total = f"/{self.total_steps}" if self.total_steps else ""
        parts = [f"step {step}{total}"]
        parts += [f"{k} {_format(float(np.asarray(v)))}" for k, v in metrics.items()]
        t0, s0 = self._start
        if self.total_steps and step > s0:
            rate = (step - s0) / (now - t0)
            parts.append(f"ETA {format_duration((self.total_steps - step) / rate)}")
        line = " | ".join(parts)
        if self.enabled:
            if self._tty:
                end = "\n" if final else ""
                self.stream.write("\r\x1b[K" + line + end)
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
        return line

    def message(self, text: str) -> None:
        """A line of its own (ends any progress line first)."""
        if self.enabled:
            if self._tty:
                self.stream.write("\r\x1b[K")
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        for writer in self._tb.values():
            writer.close()
        self._tb = {}
