"""Training checkpoints: the one module that reads and writes them.

    WORKDIR/
      checkpoints/<step>/state   TrainState (params, optimizer state, step, rng, ...)
      checkpoints/<step>/meta    JSON: config, every process's input-pipeline position
      model/                     bert_jax.json (model config) + tokenizer files

Saves are asynchronous (Orbax CheckpointManager) and cooperative: every
process calls `save` and writes its own shards. Restores take a target of
`jax.ShapeDtypeStruct`s carrying shardings, so a checkpoint written on one
mesh or device count restores onto any other. A latest checkpoint that
cannot be read is moved aside with a warning and the previous one is used.

Where a run starts (`restore_or_init` in the trainer): the workdir's latest
checkpoint -> an explicit `resume_from` checkpoint -> `init_from` pretrained
weights -> scratch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from bert_jax import pretrained
from bert_jax.config import BertConfig
from bert_jax.convert import layout

log = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
CORRUPT_DIR = "checkpoints_corrupt"
MODEL_DIR = "model"


class CheckpointError(ValueError):
    """No readable checkpoint, or one whose parameters do not match the model."""


def _find_steps(directory: str) -> list[int]:
    if not os.path.isdir(directory):
        return []
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def gather_process_values(value: Any) -> list[Any]:
    """Every process's JSON-serialisable `value`, in process order (all processes call)."""
    if jax.process_count() == 1:
        return [value]
    data = np.frombuffer(json.dumps(value).encode(), np.uint8)
    lengths = multihost_utils.process_allgather(np.array([data.size], np.int32))
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[:data.size] = data
    gathered = multihost_utils.process_allgather(padded)
    return [json.loads(bytes(row[:int(n)]).decode()) for row, n in
            zip(gathered, lengths.reshape(-1))]


def _local_meta(meta: dict) -> dict:
    """Saved meta with `pipeline` narrowed to this process's position (None when the
    process count changed: the pipeline then restarts)."""
    meta = dict(meta)
    pipelines = meta.get("pipeline") or [None]
    if len(pipelines) != jax.process_count():
        log.warning("checkpoint was written by %d process(es), this run has %d: the input "
                    "pipeline restarts from its beginning", len(pipelines), jax.process_count())
    meta["pipeline"] = (pipelines[jax.process_index()]
                        if len(pipelines) == jax.process_count() else None)
    return meta


class Checkpointer:
    """Orbax CheckpointManager over WORKDIR/checkpoints keeping the last `keep`."""

    def __init__(self, workdir: str, *, keep: int = 3, async_save: bool = True):
        self.workdir = os.path.abspath(workdir)
        self.directory = os.path.join(self.workdir, CHECKPOINTS_DIR)
        self._options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True)
        self.manager = ocp.CheckpointManager(self.directory, options=self._options)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        """Starts an async save of `state` and `meta` (JSON) at `step`. Every process
        calls this; `meta['pipeline']` may differ per process and is gathered so
        each process finds its own position on restore."""
        meta = dict(meta, pipeline=gather_process_values(meta.get("pipeline")))
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()

    def restore(self, target: Any, step: int | None = None) -> tuple[Any, dict, int] | None:
        """The latest readable checkpoint (or `step`) restored onto `target` (a tree of
        ShapeDtypeStructs with shardings). Returns (state, meta, step), or None when
        there is no checkpoint. Unreadable checkpoints newer than the one used are
        moved to WORKDIR/checkpoints_corrupt with a warning."""
        steps = [step] if step is not None else sorted(self.manager.all_steps(), reverse=True)
        for candidate in steps:
            try:
                restored = self.manager.restore(candidate, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
            except Exception as e:  # noqa: BLE001 - any failure means: unusable checkpoint
                if step is not None:
                    raise CheckpointError(f"cannot restore checkpoint {self._path(candidate)}: "
                                          f"{e}") from e
                log.warning("checkpoint %s is unreadable (%s: %s); falling back to the "
                            "previous one", self._path(candidate), type(e).__name__,
                            str(e).splitlines()[0] if str(e) else "")
                self._move_aside(candidate)
                continue
            return restored.state, _local_meta(restored.meta), candidate
        return None

    def _path(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def _move_aside(self, step: int) -> None:
        if jax.process_index() == 0:
            dest = os.path.join(self.workdir, CORRUPT_DIR, str(step))
            if os.path.exists(dest):
                shutil.rmtree(dest)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.move(self._path(step), dest)
            log.warning("moved unreadable checkpoint to %s", dest)
        multihost_utils.sync_global_devices(f"move_aside_{step}")
        self.manager.reload()


def restore_from_path(path: str, target: Any) -> tuple[Any, dict, int]:
    """An explicit resume source: a workdir, its checkpoints/ dir, or one step's dir."""
    path = os.path.abspath(path)
    if os.path.isdir(os.path.join(path, CHECKPOINTS_DIR)):
        path = os.path.join(path, CHECKPOINTS_DIR)
    if os.path.isdir(os.path.join(path, "state")):
        directory, step = os.path.dirname(path), int(os.path.basename(path))
    else:
        directory, step = path, None
    manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
        read_only=True, create=False))
    step = manager.latest_step() if step is None else step
    if step is None:
        raise CheckpointError(f"no checkpoint found under {path}")
    try:
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"cannot restore {directory}/{step}: {e}") from e
    return restored.state, _local_meta(restored.meta), step


def _flat(tree: Any) -> dict[str, Any]:
    return {"/".join(str(getattr(k, "key", k)) for k in path): leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def match_params(loaded: Any, target: Any, *, partial: bool = False,
                 source: str = "checkpoint") -> Any:
    """`loaded` numpy params arranged like `target` (arrays or ShapeDtypeStructs).

    Missing, extra or mis-shaped parameters raise CheckpointError naming them;
    with `partial=True` missing ones are filled from `target` (which must then hold
    arrays) and extra ones dropped, but shapes must still match.
    """
    have, want = _flat(loaded), _flat(target)
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    shaped = sorted(f"{k} {tuple(np.shape(have[k]))} vs model {tuple(want[k].shape)}"
                    for k in set(have) & set(want) if np.shape(have[k]) != want[k].shape)
    problems = ([f"mis-shaped: {', '.join(shaped)}"] if shaped else []) + (
        [] if partial else [f"missing: {', '.join(missing)}"] if missing else []) + (
        [] if partial else [f"unexpected: {', '.join(extra)}"] if extra else [])
    if problems:
        hint = "" if partial else " (set partial_restore to keep fresh values for missing ones)"
        raise CheckpointError(f"parameters of {source} do not match the model; "
                              + "; ".join(problems) + hint)
    treedef = jax.tree.structure(target)
    return jax.tree.unflatten(treedef, [have.get(k, leaf) for k, leaf in want.items()])


def write_model_files(workdir: str, config: BertConfig, tokenizer) -> str:
    """WORKDIR/model: the model config and tokenizer, so the workdir is loadable as a
    model directory (`pretrained.load(workdir)`). Process 0 writes."""
    directory = os.path.join(os.path.abspath(workdir), MODEL_DIR)
    if jax.process_index() == 0:
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, pretrained.MODEL_FILE), "w", encoding="utf-8") as f:
            json.dump({"model": config.replace(scan_layers=False).to_dict(), "task": None}, f,
                      indent=2, sort_keys=True)
        tokenizer.save(directory)
    return directory


def read_model_config(workdir: str) -> BertConfig:
    path = os.path.join(os.path.abspath(workdir), MODEL_DIR, pretrained.MODEL_FILE)
    if not os.path.exists(path):
        raise CheckpointError(f"{path} not found: not a bert-jax pretraining workdir")
    with open(path, encoding="utf-8") as f:
        return BertConfig.from_dict(json.load(f)["model"])


def read_checkpoint_params(step_dir: str) -> dict[str, Any]:
    """Only the params of one saved TrainState, as numpy (any saved device count)."""
    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpointer.metadata(os.path.join(step_dir, "state")).item_metadata.tree
    item = {"params": jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), tree["params"])}
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
    restored = checkpointer.restore(os.path.join(step_dir, "state"), args=ocp.args.PyTreeRestore(
        item=item, restore_args=restore_args, partial_restore=True))
    return restored["params"]


def load_pretrained_from_workdir(workdir: str) -> pretrained.Pretrained:
    """The latest readable checkpoint of a pretraining workdir as a `Pretrained`
    (numpy params with unrolled layers, the model config, the tokenizer dir)."""
    workdir = os.path.abspath(workdir)
    config = read_model_config(workdir)
    directory = os.path.join(workdir, CHECKPOINTS_DIR)
    steps = _find_steps(directory)
    for step in reversed(steps):
        try:
            params = read_checkpoint_params(os.path.join(directory, str(step)))
        except Exception as e:  # noqa: BLE001
            log.warning("checkpoint %s/%d is unreadable (%s); trying the previous one",
                        directory, step, e)
            continue
        return pretrained.Pretrained(config, layout.to_unscanned(params), None,
                                     os.path.join(workdir, MODEL_DIR))
    raise CheckpointError(f"no readable checkpoint under {directory}")
