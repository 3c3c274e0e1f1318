"""Which job a workdir belongs to, so no command replaces another job's results.

The first run in a workdir writes JOB_FILE (`{"kind": ..., "command": ...}`); every
command that writes into a workdir (`workdir_lock.hold` for pretrain, finetune and
distill; `atomic.atomic_directory` for export, convert and saved models) calls `check_kind`
first, which refuses in one line, before anything is written, a workdir of another
kind (`bert_jax.host.outputs` adds one that is also the run's input); so do the
Python entry points (`pretrain.train_and_evaluate`, `finetune.cli.run_finetune`,
`finetune.distill.distill`) and create-data's --output. Buckets (gs://) are read
and marked through `bert_jax.host.paths`. Workdirs made before the marker existed get their
kind from what they hold (`kind_of`).
"""

from __future__ import annotations

import json
import os
import time

from bert_jax.errors import UserError
from bert_jax.host import paths

JOB_FILE = "bert_jax_job.json"
PRETRAINING, FINETUNING, DISTILLATION, MODEL, DATA = \
    "pretraining", "fine-tuning", "distillation", "model", "create-data"
# What each kind's own command is, for the error line.
COMMANDS = {PRETRAINING: "bert-jax pretrain", FINETUNING: "bert-jax finetune",
            DISTILLATION: "bert-jax distill", MODEL: "bert-jax convert/export",
            DATA: "bert-jax create-data"}
DATA_SUMMARY = "summary.json"  # what create-data writes beside its TFRecords
# What each kind of folder holds, by name; the modules that write them use these.
MODEL_FILE = "bert_jax.json"        # a model directory's config and task
WORKDIR_MODEL_DIR = "model"         # a pretraining workdir's model files (no parameters)
CHECKPOINTS_DIR = "checkpoints"     # a training run's checkpoints (bert_jax.train.checkpoint)
BEST_DIR = "best"                   # a fine-tuning workdir's kept model (a model directory)
RESULTS_FILE = "eval_results.json"  # a fine-tuning run's results, naming the best run
PREDICTIONS_DIR = "predictions"     # a fine-tuning run's predictions of its test splits


def kind_of(path: str) -> str | None:
    """The kind of job whose results `path` holds, or None (absent, empty, or unknown)."""
    if not paths.isdir(path):
        return None
    marker = paths.join(path, JOB_FILE)
    if paths.isfile(marker):
        try:
            return json.loads(paths.read_text(marker))["kind"]
        except (ValueError, KeyError, TypeError):
            return None  # damaged: fall back to what the folder holds
    names = set(paths.listdir(path))
    if names & {RESULTS_FILE, BEST_DIR, PREDICTIONS_DIR} or \
            any(n.startswith("seed_") for n in names):
        return FINETUNING
    if WORKDIR_MODEL_DIR in names:  # pretraining writes model/ before its first step
        return PRETRAINING
    if MODEL_FILE in names:  # a model directory (convert, export, a saved model)
        return MODEL
    if CHECKPOINTS_DIR in names:  # an interrupted run: its checkpoints' config says which
        return FINETUNING if _checkpoint_has_task(paths.join(path, CHECKPOINTS_DIR)) \
            else PRETRAINING
    if DATA_SUMMARY in names and any(n.endswith(".tfrecord") for n in names):
        return DATA  # create-data's output: pretraining data, no run's workdir
    return None


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
    """Raises UserError when a job of `kind` may not write into `workdir`: it holds
    another kind of job's results. (Against the run's inputs too: `outputs.check_workdir`.)"""
    found = kind_of(workdir)
    if found is None or found == kind:
        return
    if {found, kind} == {FINETUNING, DISTILLATION} and \
            not paths.isfile(paths.join(workdir, JOB_FILE)):
        return  # a folder from before the marker: its results cannot tell them apart
    raise UserError(f"{workdir} holds a {found} run ({COMMANDS[found]}) whose results this "
                    "command would replace; choose another folder")


def mark(workdir: str, kind: str, command: str) -> frozenset | None:
    """Records `kind` in `workdir` unless it is recorded already (call after `check_kind`);
    returns the names the workdir held before (for `unmark_if_idle`), or None when it
    wrote nothing."""
    path = paths.join(workdir, JOB_FILE)
    if paths.exists(path):
        return None
    before = frozenset(paths.listdir(workdir)) if paths.isdir(workdir) else frozenset()
    paths.write_text(path, json.dumps({"kind": kind, "command": command}))
    return before


def unmark_if_idle(workdir: str, before: frozenset | None, ignore: str) -> None:
    """Removes the marker `mark` wrote when the run added nothing to the workdir (it
    failed before writing): a bad command leaves a folder as it was. `ignore`: the
    lock file."""
    if before is None:
        return
    try:
        if set(os.listdir(workdir)) - {JOB_FILE, ignore} <= before:
            os.remove(os.path.join(workdir, JOB_FILE))
    except OSError:
        pass  # the workdir is gone: nothing to undo


PREVIOUS_DIR = "previous"


def set_aside(workdir: str, names: list[str], into: str | None = None) -> str | None:
    """Moves those of `names` that exist in `workdir` (an earlier run's results, which a
    fresh run would replace) into WORKDIR/previous/TIME/ (or `into`, a folder an earlier
    call returned, where none of them is yet); returns that folder, or None when there
    was nothing to move. Nothing is deleted: the user removes it when done."""
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
