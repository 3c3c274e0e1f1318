"""What each kind of folder holds, how it is recognised and what a rerun may replace.

The one description of the on-disk layout that every reader and writer uses.

    PRETRAINING_WORKDIR   bert-jax pretrain        checkpoints/, model/, data/, generator/
    FINETUNING_WORKDIR    bert-jax finetune        checkpoints/, best/, eval_results.json, ...
    DISTILLATION_WORKDIR  bert-jax distill         the fine-tuning layout
    MODEL_DIRECTORY       convert, export, best/   bert_jax.json, params/, the tokenizer's files
    DATA_FOLDER           bert-jax create-data     pretrain-*-of-*.tfrecord, options.json, ...

The first run in a workdir writes JOB_FILE (`{"kind": ..., "command": ...}`); every
command that writes into a folder (`workdir_lock.hold` for pretrain, finetune and
distill; `atomic.atomic_directory` for export, convert and saved models) calls
`check_kind` first, which refuses in one line, before anything is written, a folder of
another kind (`bert_jax.host.outputs` adds one that is also the run's input); so do the
Python entry points (`pretrain.train_and_evaluate`, `finetune.selection.run_finetune`,
`finetune.distill.distill`) and create-data's --output. Folders made before the marker
existed get their kind from what they hold (`kind_of`: each description's `recognises`).
A fresh run moves what it replaces into WORKDIR/previous/TIME (`set_aside`): nothing is
deleted. Buckets (gs://) are read and marked through `bert_jax.host.paths`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import shutil
import time
from collections.abc import Collection

from bert_jax.errors import UserError
from bert_jax.host import paths

JOB_FILE = "bert_jax_job.json"  # the kind marker, in every workdir a job wrote
PREVIOUS_DIR = "previous"       # what fresh runs set aside, one TIME folder each
PRETRAINING, FINETUNING, DISTILLATION, MODEL, DATA = \
    "pretraining", "fine-tuning", "distillation", "model", "create-data"
# What each kind's own command is, for the error line.
COMMANDS = {PRETRAINING: "bert-jax pretrain", FINETUNING: "bert-jax finetune",
            DISTILLATION: "bert-jax distill", MODEL: "bert-jax convert/export",
            DATA: "bert-jax create-data"}


@dataclasses.dataclass(frozen=True)
class ModelDirectory:
    """A model (`bert_jax.weights.pretrained`).

    What convert and export write, a fine-tuning run's best/, a Hub model converted. Replaced whole
    or not at all (`atomic.atomic_directory`); the tokenizer's own files lie beside these."""

    kind: str = MODEL
    config: str = "bert_jax.json"  # {"model": BertConfig fields, "task": {...} or null}
    params: str = "params"         # an Orbax checkpoint of the parameter tree

    def recognises(self, names: Collection[str]) -> bool:
        return self.config in names


@dataclasses.dataclass(frozen=True)
class RunWorkdir:
    """What every training run writes in its workdir.

    kind None: any run's, which is what `bert_jax.train` knows. `earlier_run`: the logs and
    checkpoints of a finished or other run, which a fresh start sets aside."""

    kind: str | None = None
    checkpoints: str = "checkpoints"  # one folder per step (`bert_jax.train.checkpoint`)
    metrics: str = "metrics.jsonl"
    tensorboard: str = "tensorboard"

    @property
    def earlier_run(self) -> tuple[str, ...]:
        return (self.checkpoints, self.metrics, self.tensorboard)

    def checkpoint_steps(self, workdir: str) -> list[int]:
        """The steps of the checkpoints under WORKDIR/checkpoints, ascending."""
        directory = paths.join(workdir, self.checkpoints)
        names = paths.listdir(directory) if paths.isdir(directory) else []
        return sorted(int(n) for n in names if n.isdigit())


@dataclasses.dataclass(frozen=True)
class PretrainingWorkdir(RunWorkdir):
    """`bert-jax pretrain`'s workdir.

    Each run rewrites model/ (before its first step), generator/ (with each checkpoint) and data/
    (when its options change); checkpoints are resumed, never replaced."""

    kind: str = PRETRAINING
    model: str = "model"          # a model directory without params: config and tokenizer
    data: str = "data"            # raw-text input converted once (a DATA_FOLDER)
    generator: str = "generator"  # ELECTRA's generator, a model directory

    def recognises(self, names: Collection[str]) -> bool:
        return self.model in names  # written before the first step

    @property
    def replaced(self) -> tuple[str, ...]:
        return (self.model, self.generator, self.data)


@dataclasses.dataclass(frozen=True)
class FinetuningWorkdir(RunWorkdir):
    """`bert-jax finetune`'s (and distill's) workdir.

    A fresh run sets aside the `earlier_run` when it starts and the `earlier_results` when it keeps
    its first model. Several runs (seeds, a grid) each have a folder of this layout below it."""

    kind: str = FINETUNING
    best: str = "best"                          # the kept model (a model directory)
    results: str = "eval_results.json"          # the run's results, naming the best run
    evaluate_results: str = "evaluate_results.json"  # written by `bert-jax evaluate`
    predictions: str = "predictions"            # the test splits' predictions
    submissions: str = "glue_submission"        # GLUE's test files
    seed_prefix: str = "seed_"                  # seed_N/: one run of several seeds

    def recognises(self, names: Collection[str]) -> bool:
        return bool(set(names) & {self.results, self.best, self.predictions}) or \
            any(n.startswith(self.seed_prefix) for n in names)

    def seed_dir(self, seed: int) -> str:
        return f"{self.seed_prefix}{seed}"

    @property
    def earlier_results(self) -> tuple[str, ...]:
        return (self.best, self.results, self.evaluate_results, self.predictions,
                self.submissions)


@dataclasses.dataclass(frozen=True)
class DataFolder:
    """Pretraining data.

    Create-data's output, or raw text a pretraining run converted (WORKDIR/data). A rerun replaces
    its `replaced` names (other files stay)."""

    kind: str = DATA
    record: str = "options.json"   # what the data was made with (`bert_jax.data.data_record`)
    summary: str = "summary.json"  # create-data's counts
    parts: str = "parts"           # per-input-file parts, until the shards are assembled
    shards: str = "pretrain-*-of-*.tfrecord"
    array_record_shards: str = "pretrain-*-of-*.array_record"  # --format array_record
    temporaries: str = ".tmp-*"

    def shard(self, index: int, count: int, record_format: str = "tfrecord") -> str:
        return f"pretrain-{index:05d}-of-{count:05d}.{record_format}"

    def recognises(self, names: Collection[str]) -> bool:
        return self.summary in names and any(n.endswith((".tfrecord", ".array_record"))
                                             for n in names)

    @property
    def replaced(self) -> tuple[str, ...]:
        return (self.shards, self.array_record_shards, self.summary, self.record,
                self.temporaries)

    def is_replaced(self, name: str) -> bool:
        return any(fnmatch.fnmatch(name, pattern) for pattern in self.replaced)


MODEL_DIRECTORY = ModelDirectory()
TRAINING_WORKDIR = RunWorkdir()
PRETRAINING_WORKDIR = PretrainingWorkdir()
FINETUNING_WORKDIR = FinetuningWorkdir()
DISTILLATION_WORKDIR = FinetuningWorkdir(kind=DISTILLATION)
DATA_FOLDER = DataFolder()
# The names a job's folder uses for its own files (an output file may not take them).
OWN_FILES = frozenset({JOB_FILE, MODEL_DIRECTORY.config, FINETUNING_WORKDIR.results,
                       DATA_FOLDER.summary, DATA_FOLDER.record})


def kind_of(path: str) -> str | None:
    """The kind of job whose results `path` holds, or None (absent, empty, or unknown)."""
    if not paths.isdir(path):
        return None
    marker = paths.join(path, JOB_FILE)
    if paths.isfile(marker):
        try:
            return json.loads(paths.read_text(marker))["kind"]
        except (ValueError, KeyError, TypeError):
            return None  # damaged: its kind is unknown
    names = set(paths.listdir(path))
    for layout in (FINETUNING_WORKDIR, PRETRAINING_WORKDIR, MODEL_DIRECTORY):
        if layout.recognises(names):
            return layout.kind
    if TRAINING_WORKDIR.checkpoints in names:  # interrupted: its checkpoints' config says
        checkpoints = paths.join(path, TRAINING_WORKDIR.checkpoints)
        return FINETUNING if _checkpoint_has_task(checkpoints) else PRETRAINING
    return DATA if DATA_FOLDER.recognises(names) else None


def _checkpoint_has_task(directory: str) -> bool:
    """Whether a checkpoint's saved run config names a fine-tuning task."""
    for step in sorted(paths.listdir(directory), reverse=True):
        meta = paths.join(directory, step, "meta")
        for name in paths.listdir(meta) if paths.isdir(meta) else ():
            try:
                saved = json.loads(paths.read_text(paths.join(meta, name)))
            except (OSError, ValueError):
                continue
            if isinstance(saved, dict) and isinstance(saved.get("config"), dict):
                return "task" in saved["config"]
    return False


def check_kind(workdir: str, kind: str) -> None:
    """Raises UserError when a job of `kind` may not write into `workdir`.

    It holds another kind of job's results. (Against the run's inputs too:
    `outputs.check_workdir`.)"""
    found = kind_of(workdir)
    if found is None or found == kind:
        return
    if {found, kind} == {FINETUNING, DISTILLATION} and \
            not paths.isfile(paths.join(workdir, JOB_FILE)):
        return  # a folder from before the marker: its results cannot tell them apart
    raise UserError(f"{workdir} holds a {found} run ({COMMANDS[found]}) whose results this "
                    "command would replace; choose another folder")


def mark(workdir: str, kind: str, command: str) -> frozenset | None:
    """Records `kind` in `workdir` unless it is recorded already (call after `check_kind`).

    Returns the names the workdir held before (for `unmark_if_idle`), or None when it wrote
    nothing."""
    path = paths.join(workdir, JOB_FILE)
    if paths.exists(path):
        return None
    before = frozenset(paths.listdir(workdir)) if paths.isdir(workdir) else frozenset()
    paths.write_text(path, json.dumps({"kind": kind, "command": command}))
    return before


def unmark_if_idle(workdir: str, before: frozenset | None, ignore: str) -> None:
    """Removes the marker `mark` wrote when the run added nothing to the workdir.

    That is, it failed before writing a result: the empty files and folders it set up go too, so
    a bad command leaves a folder as it was (and one it created is then removed with the lock).
    `ignore`: the lock file."""
    if before is None:
        return
    try:
        added = [os.path.join(workdir, name)
                 for name in set(os.listdir(workdir)) - before - {JOB_FILE, ignore}]
        if all(_holds_nothing(path) for path in added):  # empty logs and folders set up
            for path in added:
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            os.remove(os.path.join(workdir, JOB_FILE))
    except OSError:
        pass  # the workdir is gone: nothing to undo


def _holds_nothing(path: str) -> bool:
    """Whether `path` is an empty file, or a folder of nothing but empty files and folders."""
    if os.path.islink(path):
        return False
    if os.path.isdir(path):
        return all(_holds_nothing(os.path.join(path, n)) for n in os.listdir(path))
    return os.path.getsize(path) == 0


def set_aside(workdir: str, names: Collection[str], into: str | None = None) -> str | None:
    """Moves an earlier run's results out of the way, into WORKDIR/previous/TIME/.

    Those of `names` that exist in `workdir` (an earlier run's results, which a fresh run would
    replace) go into WORKDIR/previous/TIME/ (or `into`, a folder an earlier call returned, where
    none of them is yet); returns that folder, or None when there was nothing to move. Nothing is
    deleted: the user removes it when done."""
    present = [n for n in names if os.path.lexists(os.path.join(workdir, n)) and not (
        os.path.isdir(os.path.join(workdir, n)) and not os.listdir(os.path.join(workdir, n)))]
    if not present or "://" in workdir:
        return None
    if into and not any(os.path.lexists(os.path.join(into, n)) for n in present):
        aside = into
    else:
        aside = os.path.join(workdir, PREVIOUS_DIR,
                             time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        base, n = aside, 1
        while os.path.exists(aside):  # two fresh starts within a second
            aside, n = f"{base}-{n}", n + 1
    os.makedirs(aside, exist_ok=True)
    for name in present:
        os.replace(os.path.join(workdir, name), os.path.join(aside, name))
    return aside
