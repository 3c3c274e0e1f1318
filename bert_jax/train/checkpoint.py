"""Training checkpoints: the one module that saves and restores TrainStates.

    WORKDIR/
      checkpoints/<step>/state   TrainState (params, optimizer state, step, rng, ...)
      checkpoints/<step>/meta    JSON: config, every process's input-pipeline position
      model/                     bert_jax.json (model config) + tokenizer files, written
                                 and read by `bert_jax.weights.pretrained`

This module alone knows that layout; `read_params` and `latest_params` read a
checkpoint's parameters without its optimizer state (what `bert_jax.weights.pretrained` loads
from a pretraining workdir).

Saves are asynchronous (Orbax CheckpointManager) and cooperative: every
process calls `save` and writes its own shards. Restores take a target of
`jax.ShapeDtypeStruct`s carrying shardings, so a checkpoint written on one
mesh or device count restores onto any other.

Each checkpoint's meta records the run that wrote it (`run_description`: the
config, the resolved model, the vocabulary's fingerprint). A resume compares it
with the new run before restoring anything: a differing key that shapes the state
or the data stops the run (`IncompatibleCheckpointError`, one line naming each key
and both values); a key in CHANGEABLE_KEYS continues with a warning. Only a
checkpoint that matches and still cannot be read counts as corrupt: it is moved to
WORKDIR/checkpoints_corrupt/<step>-<time> (never deleting or overwriting anything)
and the previous one is used; when none is left the run stops, unless it is asked
to start fresh.

Where a run starts (`lifecycle.Job.restore`, then the job's fresh state): the workdir's
latest checkpoint -> an explicit `resume_from` checkpoint -> `init_from` pretrained
weights -> scratch.
"""

from __future__ import annotations

import contextlib
import errno as errno_
import json
import logging
import re
import threading
import time
import warnings
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from bert_jax.errors import CheckpointError
from bert_jax.host import library_log, paths
from bert_jax.host.folders import TRAINING_WORKDIR
from bert_jax.train import run_config

log = logging.getLogger(__name__)

CORRUPT_DIR = "checkpoints_corrupt"
# A step's items: the saved names of `Checkpointer.save`'s Composite arguments.
STATE_ITEM, META_ITEM = "state", "meta"


# Config keys a resumed run may change: they shape neither the TrainState nor the
# examples (restores re-shard onto any mesh; the pipeline position counts examples,
# not batches). The schedule keys change the rest of the run's learning rate, which
# is why a changed key is named in a warning. Every other key must match.
# The run-config keys whose schema allows a resume to change them, and the resolved
# model's fields of the same kind: FP8 matmuls (the same parameters and optimizer state as
# bf16, bert_jax/models/fp8.py), how attention is computed and how much dropout is applied.
CHANGEABLE_KEYS = run_config.resume_keys(run_config.PRETRAIN, run_config.FINETUNE) | {
    "model.dtype", "model.remat_policy", "model.fp8", "model.attention_impl",
    "model.attention_probs_dropout_prob", "model.hidden_dropout_prob"}
# Described by the resolved model and the vocabulary fingerprint instead.
_INDIRECT_KEYS = ("model", "tokenizer")


class IncompatibleCheckpointError(CheckpointError):
    """A readable checkpoint written by a run whose state or data differ from this one's."""


def run_description(config: dict, model: dict, vocabulary: str) -> dict:
    """What a checkpoint's meta records about the run that wrote it.

    The run config (a plain dict), the resolved model config and the vocabulary's fingerprint."""
    return {"config": config, "model": model, "vocabulary": vocabulary}


def _flat_run(run: dict, saved: bool = False) -> dict[str, Any]:
    # A saved run's config is compared, never run: it takes today's names and the values
    # of keys added since (the schema's RENAMED_KEYS, ADDED_KEYS), not the schema check
    # (an old value out of today's range is a difference to report).
    config = {**(run_config.ADDED_KEYS if saved else {}), **(run.get("config") or {})}
    if saved:
        config = {run_config.RENAMED_KEYS.get(k, k): v for k, v in config.items()}
    flat = {k: v for k, v in config.items() if k not in _INDIRECT_KEYS}
    flat.update({f"model.{k}": v for k, v in (run.get("model") or {}).items()})
    if run.get("vocabulary"):
        flat["vocabulary"] = run["vocabulary"]
    return json.loads(json.dumps(flat))  # tuples -> lists, as the saved JSON has them


def compare_runs(saved: dict, current: dict) -> tuple[list[str], list[str]]:
    """(fixed, changeable) differences, each 'key saved -> current'.

    Keys the saved run did not record (older checkpoints) are not compared, except
    `run_config.ADDED_KEYS`."""
    have, want = _flat_run(saved, saved=True), _flat_run(current)
    fixed, changeable = [], []
    for key in sorted(set(have) & set(want)):
        if have[key] != want[key]:
            (changeable if key in CHANGEABLE_KEYS else fixed).append(
                f"{key} {have[key]!r} -> {want[key]!r}")
    return fixed, changeable


def check_compatible(meta: dict, run: dict | None, source: str) -> None:
    """Raises IncompatibleCheckpointError naming every fixed key that differs from `run`'s.

    The keys compared are the checkpoint's run's and `run`'s; it warns about changeable ones."""
    if run is None or "config" not in meta:
        return
    fixed, changeable = compare_runs(meta, run)
    if fixed:
        raise IncompatibleCheckpointError(
            f"checkpoint {source} was written by a different run ({'; '.join(fixed)}): "
            "these keys cannot change on resume; use the checkpoint's values or a new --workdir")
    if changeable:
        log.warning("resuming %s with changed settings: %s", source, "; ".join(changeable))


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
    """Saved meta with `pipeline` narrowed to this process's position.

    `pipeline` is None when the process count changed: the pipeline then restarts."""
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
        self.workdir = paths.abspath(workdir)
        self.directory = paths.join(self.workdir, TRAINING_WORKDIR.checkpoints)
        self._options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True)
        self.manager = ocp.CheckpointManager(self.directory, options=self._options)
        self._saving: int | None = None  # the step of the latest save started

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        """Starts an async save of `state` and `meta` (JSON) at `step`.

        Every process calls this; `meta['pipeline']` may differ per process and is gathered so each
        process finds its own position on restore."""
        meta = dict(meta, pipeline=gather_process_values(meta.get("pipeline")))
        with self._write_errors_as_one_line():  # also reports the previous save's failure
            self.manager.save(step, args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))
        self._saving = step

    def wait(self) -> None:
        with self._write_errors_as_one_line():
            self.manager.wait_until_finished()

    def check(self) -> None:
        """Raises the OSError of a background save that failed (a full disk).

        So the run stops at it rather than at the next save; cheap enough for every step."""
        with self._write_errors_as_one_line():
            self.manager.check_for_errors()

    @contextlib.contextmanager
    def _write_errors_as_one_line(self):
        """A failed write (`_is_write_error`) becomes `_save_failed`'s OSError.

        Other errors pass unchanged."""
        try:
            yield
        except Exception as e:  # noqa: BLE001
            if _is_write_error(e):
                raise self._save_failed(e) from e
            raise

    def _save_failed(self, error: Exception) -> OSError:
        """One line for a failed write (a full disk: the path and the free space).

        Orbax writes each step into a temporary directory first, so the earlier checkpoints are
        intact; the partial one is removed."""
        _release_stalled_writers()
        with contextlib.suppress(Exception):  # let the background threads end
            self.manager.wait_until_finished()
        self._remove_partial()
        self.manager.reload()
        free_bytes = paths.free_space(self.directory)
        free = "free space unknown" if free_bytes is None else f"{free_bytes / 2**20:.1f} MiB free"
        errno = getattr(error, "errno", None) or (28 if "os_error_code='28'" in str(error)
                                                  else None)
        reason = getattr(error, "strerror", None) or (
            "No space left on device" if errno == 28 else _first_line(error)[:200])
        latest = self.manager.latest_step()
        kept = ("no complete checkpoint was written yet" if latest is None else
                f"the last complete one, step {latest}, is intact")
        fix = _FIXES.get(errno)
        then = (f": {fix}, then rerun the same command" if fix else "; rerun the same command")
        resumes = " (it resumes from that step)" if latest is not None else ""
        return OSError(errno, f"writing checkpoint {self._saving} under {self.directory} "
                       f"failed ({reason}; {free}); {kept}{then}{resumes}")

    def _remove_partial(self) -> None:
        """Deletes the temporary directories of unfinished saves (process 0 owns them).

        Orbax reports a failed save at its first failed write while the others may still land
        (and recreate the directory): delete until none is seen for 0.3 s (5 s at most)."""
        if jax.process_index() != 0:
            return
        deadline, quiet_since = time.time() + 5, time.time()
        while time.time() < deadline and time.time() - quiet_since < 0.3:
            partial = paths.glob(paths.join(self.directory, "*.orbax-checkpoint-tmp*"))
            for path in partial:
                with contextlib.suppress(OSError):
                    paths.rmtree(path, missing_ok=True)
            if partial:
                quiet_since = time.time()
            time.sleep(0.05)

    @contextlib.contextmanager
    def saves_finished(self):
        """On an exception in the block, finishes the save in flight before it propagates.

        A failure of that save is logged. A process that exits mid-save leaves a partial checkpoint
        and Orbax tracebacks behind."""
        try:
            yield
        except BaseException:
            try:
                self.manager.wait_until_finished()
            except Exception:  # noqa: BLE001 - the block's error is the one to report
                _release_stalled_writers()
                self._remove_partial()
            raise

    def close(self) -> None:
        self.manager.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def restore(self, target: Any, step: int | None = None, *, run: dict | None = None,
                start_fresh: bool = False) -> tuple[Any, dict, int] | None:
        """The latest readable checkpoint (or `step`) restored onto `target`.

        `target`: a tree of ShapeDtypeStructs with shardings. Returns (state, meta, step), or None
        when there is no checkpoint. `run` (a `run_description`) is checked against each
        checkpoint's before its state is read (IncompatibleCheckpointError). Unreadable checkpoints
        newer than the one used are moved to WORKDIR/checkpoints_corrupt with a warning; when none
        is left this raises CheckpointError unless `start_fresh` (then it returns None)."""
        steps = [step] if step is not None else sorted(self.manager.all_steps(), reverse=True)
        moved = []
        for candidate in steps:
            source = self._path(candidate)
            try:
                meta, shapes = _read_meta(source), _saved_shapes(source)
            except Exception as e:  # noqa: BLE001 - any failure means: unusable checkpoint
                problem = e
            else:
                check_compatible(meta, run, source)
                _check_shapes(shapes, target, source)
                try:
                    restored = self.manager.restore(candidate, args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
                    return restored.state, _local_meta(restored.meta), candidate
                except Exception as e:  # noqa: BLE001
                    problem = e
            if step is not None:
                raise CheckpointError(f"cannot restore checkpoint {source}: "
                                      f"{_first_line(problem)}") from problem
            moved.append(self._move_aside(candidate))
            earlier = [s for s in steps if s < candidate]
            log.warning("checkpoint of step %d (%s) is unreadable: %s; moved it to %s and %s%s",
                        candidate, source, _first_line(problem), moved[-1],
                        f"trying step {earlier[0]}" if earlier else "no earlier one is left",
                        library_log.keep(problem, f"reading checkpoint {source}"))
        if moved and not start_fresh:
            raise CheckpointError(
                f"no readable checkpoint left in {self.directory} (unreadable ones moved to "
                f"{', '.join(moved)}); rerun with --config.start_fresh=true to start over")
        return None

    def _path(self, step: int) -> str:
        return paths.join(self.directory, str(step))

    def _move_aside(self, step: int) -> str:
        """Moves checkpoint `step` to a new, unique CORRUPT_DIR/<step>-<time>[-n]."""
        base = paths.join(self.workdir, CORRUPT_DIR,
                            f"{step}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}")
        dest, n = base, 1
        while paths.exists(dest):
            dest, n = f"{base}-{n}", n + 1
        if jax.process_index() == 0:
            paths.makedirs(paths.dirname(dest))
            paths.move(self._path(step), dest)  # local: atomic, copies nothing
        multihost_utils.sync_global_devices(f"move_aside_{step}")
        self.manager.reload()
        return dest


# What to do before rerunning, by the errno of a failed write.
_FIXES = {errno_.ENOSPC: "free space on its disk", errno_.EDQUOT: "free space (disk quota)",
          errno_.EROFS: "make it writable", errno_.EACCES: "make it writable",
          errno_.EPERM: "make it writable"}


def _release_stalled_writers() -> None:
    """Ends Orbax's writer threads that wait for a failed save's earlier stage (its directory made).

    They would wait out Orbax's 300 s coordination timeout, and the process cannot exit before they
    end. Each is cancelled and given the signals it waits for, so it returns at once without
    writing. One process only: there the signals are local to it. (Orbax offers no public way to
    reach them.)"""
    if jax.process_count() != 1:
        return
    from orbax.checkpoint._src.futures import future
    for thread in threading.enumerate():
        if isinstance(thread, future._SignalingThread) and thread.is_alive():
            with contextlib.suppress(Exception):  # a thread ending meanwhile
                thread.cancel()
                future.set_signals(thread._receive_signals, operation_id=thread._operation_id)
            # Their coroutines never run: no "coroutine ... was never awaited" at exit.
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)


def _is_write_error(error: BaseException) -> bool:
    """An OSError, or TensorStore's error for a failed write.

    TensorStore's is a ValueError naming the OS error: RESOURCE_EXHAUSTED ... No space left on
    device [os_error_code='28']."""
    return isinstance(error, OSError) or "os_error_code=" in str(error)


def _first_line(error: BaseException) -> str:
    """What failed, in one line.

    A TensorStore error as the array and the reason, not the store's spec that Orbax's message
    quotes in full (the caller files the full text)."""
    chain = [error]
    while len(chain) < 10 and (chain[-1].__cause__ or chain[-1].__context__) is not None:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    for e in chain:  # TensorStore's own: Error reading "ARRAY/CHUNK" in ...: REASON; ...
        found = re.search(r'Error (?:reading|writing) "([^"/]+)', str(e))
        if found:
            return f"array {found[1]}: {str(e).split(';')[0].rsplit(': ', 1)[-1]}"
    text = str(error).split(" See full TensorStore details")[0]
    found = re.search(r"'path': '([^']+)/'", str(error))
    if found:  # Orbax's, quoting the spec of the array it was reading
        return f"array {found[1]}: {text.splitlines()[0]}"
    return text.splitlines()[0] if text else type(error).__name__


def latest_saved_config(workdir: str) -> dict | None:
    """The run config saved with WORKDIR's latest checkpoint, or None without a readable one.

    Keys added since are filled in (ADDED_KEYS); an unreadable checkpoint is restoring's to
    report."""
    directory = paths.join(workdir, TRAINING_WORKDIR.checkpoints)
    try:
        steps = [int(name) for name in paths.listdir(directory) if name.isdigit()]
        config = _read_meta(paths.join(directory, str(max(steps))))["config"] if steps else None
    except (OSError, ValueError, KeyError):
        return None
    return {**run_config.ADDED_KEYS, **config} if isinstance(config, dict) else None


def _read_meta(step_dir: str) -> dict:
    """A checkpoint's meta JSON, read without restoring (or registering) its state."""
    return json.loads(paths.read_text(paths.join(step_dir, META_ITEM, "metadata")))


def array_tree(directory: str) -> Any:
    """The tree of array metadata (shape, dtype) of the Orbax checkpoint in `directory`.

    CheckpointError naming it when that index is missing or damaged."""
    metadata = ocp.PyTreeCheckpointer().metadata(directory).item_metadata
    if metadata is None:
        raise CheckpointError(f"the array index of {directory} is missing or damaged")
    return metadata.tree


def _saved_shapes(step_dir: str) -> list[tuple]:
    """The sorted shapes of a checkpoint's saved state arrays (its metadata only)."""
    tree = array_tree(paths.join(step_dir, STATE_ITEM))
    return sorted(tuple(m.shape) for m in jax.tree.leaves(tree) if hasattr(m, "shape"))


def _check_shapes(have: list[tuple], target: Any, source: str) -> None:
    """Raises IncompatibleCheckpointError when the saved arrays' shapes are not the target's.

    That is a checkpoint of another model or optimizer, e.g. one without a recorded config: such a
    checkpoint is not corrupt."""
    want = sorted(tuple(t.shape) for t in jax.tree.leaves(target))
    if have != want:
        raise IncompatibleCheckpointError(
            f"checkpoint {source} holds {len(have)} arrays that do not fit this run's "
            f"{len(want)} (another model or optimizer); use the checkpoint's config or a new "
            "--workdir")


def restore_from_path(path: str, target: Any, *, run: dict | None = None
                      ) -> tuple[Any, dict, int]:
    """An explicit resume source.

    A workdir, its checkpoints/ dir, or one step's dir; `run` is checked as in
    `Checkpointer.restore`."""
    path = paths.abspath(path)
    if paths.isdir(paths.join(path, TRAINING_WORKDIR.checkpoints)):
        path = paths.join(path, TRAINING_WORKDIR.checkpoints)
    if paths.isdir(paths.join(path, STATE_ITEM)):
        directory, step = paths.dirname(path), int(paths.basename(path))
    else:
        directory, step = path, None
    with ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
            read_only=True, create=False)) as manager:
        step = manager.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no checkpoint found under {path}")
        source = paths.join(directory, str(step))
        try:
            meta, shapes = _read_meta(source), _saved_shapes(source)
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(f"cannot restore {source}: {_first_line(e)}") from e
        check_compatible(meta, run, source)
        _check_shapes(shapes, target, source)
        try:
            restored = manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(f"cannot restore {source}: {_first_line(e)}") from e
        return restored.state, _local_meta(restored.meta), step


# --- the parameters alone ---------------------------------------------------------------

def steps(workdir: str) -> list[int]:
    """The steps with a checkpoint directory under WORKDIR/checkpoints, ascending."""
    return TRAINING_WORKDIR.checkpoint_steps(paths.abspath(workdir))


def read_params(step_dir: str) -> dict[str, Any]:
    """Only the params of one checkpoint's TrainState, as host numpy arrays.

    `step_dir`: .../checkpoints/<step>. However many devices wrote them; the optimizer state is not
    read."""
    directory = paths.join(step_dir, STATE_ITEM)
    checkpointer = ocp.PyTreeCheckpointer()
    tree = array_tree(directory)
    item = {"params": jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), tree["params"])}
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
    return checkpointer.restore(directory, args=ocp.args.PyTreeRestore(
        item=item, restore_args=restore_args, partial_restore=True))["params"]


def latest_params(workdir: str) -> dict[str, Any]:
    """The params of WORKDIR's latest readable checkpoint (`read_params`).

    Unreadable newer ones are skipped with a warning (and left in place). CheckpointError when none
    is readable."""
    directory = paths.join(paths.abspath(workdir), TRAINING_WORKDIR.checkpoints)
    for step in reversed(steps(workdir)):
        try:
            return read_params(paths.join(directory, str(step)))
        except Exception as e:  # noqa: BLE001 - any failure means: unusable checkpoint
            log.warning("checkpoint of step %d (%s/%d) is unreadable: %s; trying the previous "
                        "one%s", step, directory, step, _first_line(e),
                        library_log.keep(e, f"reading checkpoint {directory}/{step}"))
    raise CheckpointError(f"no readable checkpoint under {directory}")
