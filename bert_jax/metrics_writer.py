"""Training metrics: a live progress line, TensorBoard events and `metrics.jsonl`.

Only process 0 writes (every process may call; the others do nothing), so
multi-host runs produce one log. Reusable by any loop:

    writer = MetricsWriter(workdir, total_steps=1000)
    writer.write(step, {"loss": 2.3, "learning_rate": 1e-4}, prefix="train")
    writer.progress(step, {"loss": 2.3})      # one updating terminal line
    writer.close()
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from typing import Mapping

import jax
import numpy as np


def _scalar_metadata() -> bytes:
    from tensorflow.core.framework import summary_pb2
    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"  # TensorBoard's scalar dashboard
    return metadata.SerializeToString()


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
    """Writes scalars to WORKDIR/metrics.jsonl (one JSON object per write) and to
    TensorBoard event files under WORKDIR/tensorboard/{prefix}; shows progress."""

    def __init__(self, workdir: str, *, total_steps: int | None = None,
                 tensorboard: bool = True, stream=None, append: bool = True):
        """`append=False` starts the log over: for runs that restart rather than resume
        (fine-tuning), so the workdir's curves are those of the run it holds."""
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
            os.makedirs(workdir, exist_ok=True)
            path = os.path.join(workdir, "metrics.jsonl")
            if not append:
                self.replaced_earlier_run = os.path.exists(path)
                shutil.rmtree(os.path.join(workdir, "tensorboard"), ignore_errors=True)
            self._jsonl = open(path, "a" if append else "w", encoding="utf-8")
            if tensorboard:
                # Imported now (seconds) rather than at the first write, inside the
                # timed training loop.
                from bert_jax.tf_host import tensorflow
                tensorflow()

    def drop_after(self, step: int) -> None:
        """Removes the records of steps after `step` from metrics.jsonl: a run resumed
        from an earlier checkpoint replays them, and each step is logged once."""
        if not self.enabled:
            return
        self._jsonl.close()
        path = os.path.join(self.workdir, "metrics.jsonl")
        with open(path, encoding="utf-8") as f:
            kept = [line for line in f if _step_of(line) is not None and _step_of(line) <= step]
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(path + ".tmp", path)
        self._jsonl = open(path, "a", encoding="utf-8")

    def _summary_writer(self, prefix: str):
        if prefix not in self._tb:
            from bert_jax.tf_host import tensorflow
            tf = tensorflow()  # only for its event-file writer
            self._tb[prefix] = tf.summary.create_file_writer(
                os.path.join(self.workdir, "tensorboard", prefix))
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
            import tensorflow as tf
            with self._summary_writer(prefix).as_default(step=int(step)):
                for name, value in scalars.items():
                    # What tf.summary.scalar writes, without needing the tensorboard package.
                    tf.summary.write(name, tf.constant(value, tf.float32),
                                     metadata=_scalar_metadata())
            self._summary_writer(prefix).flush()

    def progress(self, step: int, metrics: Mapping[str, float], *, final: bool = False) -> str:
        """Prints `step/total | name value ... | ETA`; one updating line on a terminal,
        one line per call otherwise. Returns the line."""
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
