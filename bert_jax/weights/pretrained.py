"""Model directories.

The unit `convert` writes and `embed`, `finetune`, `predict` and `export` read. This module is the
one place that reads and writes them.

    MODEL_DIR/
      bert_jax.json     {"model": BertConfig fields, "task": {...} or null}
      vocab.txt | spm.model, tokenizer_config.json   (the tokenizer's own files)
      params/           Orbax checkpoint of the parameter tree (unrolled layers)

Wherever a command takes a model, `open_model` (the one resolver, run where the command
starts) accepts a model directory; a pretraining workdir (its checkpoints written by
`bert-jax pretrain` in the layout `bert_jax.train.checkpoint` owns, its model files in
WORKDIR/model: its latest readable checkpoint is read); a fine-tuning workdir (its kept
model); or a model published on the Hugging Face Hub, by name: `hf:ORG/NAME[@REVISION]` (or
`ORG/NAME` where no such local path exists), fetched (`bert_jax.weights.hub`) and converted
once into the cache beside it (`local_path`). Writes are atomic: a failed conversion
leaves nothing at the destination.

Also here, because every reader of a model directory needs them: the task metadata
(`task_head`, `label_names`) and `init_params`, which fits loaded
numpy weights to a model, in either layer layout (`bert_jax.models.layer_layout`), and places
them on its mesh.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from bert_jax.errors import CheckpointError, UserError
from bert_jax.host import encoding, folders, paths, stopping, workdir_state
from bert_jax.host.atomic import atomic_directory
from bert_jax.host.folders import (
    FINETUNING_WORKDIR,
    MODEL_DIRECTORY,
    PRETRAINING_WORKDIR,
    TRAINING_WORKDIR,
)
from bert_jax.models import matching, task_heads
from bert_jax.models.config import BertConfig, ConfigError, check_inputs_fit
from bert_jax.models.layer_layout import encoder_of, match_layout, to_unscanned
from bert_jax.tokenization import has_tokenizer, load_tokenizer
from bert_jax.train import checkpoint


@dataclasses.dataclass
class Pretrained:
    """A loaded model.

    Config, parameters (numpy, unrolled layers), optional task description (e.g. {"name": "sst2",
    "num_labels": 2, ...}) and the directory holding the tokenizer files."""

    config: BertConfig
    params: dict[str, Any]
    task: dict[str, Any] | None
    tokenizer_dir: str

    @property
    def head(self) -> task_heads.Head:
        """Its head, as its task record states it (`task_head`)."""
        return task_head(self.task, self.params)


# --- writing ----------------------------------------------------------------------------

def write_model_files(directory: str | os.PathLike, config: BertConfig, *, tokenizer=None,
                      task: dict[str, Any] | None = None) -> None:
    """Writes `bert_jax.json` and the tokenizer's files into `directory` (created).

    `bert_jax.json` holds the config with unrolled layers, the task, the tokenizer's fingerprint for
    `check_tokenizer`. One process calls this."""
    paths.makedirs(directory)
    vocabulary = None
    if tokenizer is not None:
        tokenizer.save(directory)
        vocabulary = load_tokenizer(directory).fingerprint()  # as a later load reads it
    paths.write_text(paths.join(directory, MODEL_DIRECTORY.config), json.dumps(
        {"model": config.replace(scan_layers=False).to_dict(), "task": task,
         **({"vocabulary": vocabulary} if vocabulary else {})}, indent=2, sort_keys=True))


def save(path: str | os.PathLike, config: BertConfig, params: dict[str, Any], *,
         tokenizer=None, task: dict[str, Any] | None = None, overwrite: bool = False,
         extra_files: dict[str, str] | None = None) -> None:
    """Writes a model directory atomically (into a temporary sibling, then renamed).

    `params` are host arrays (or fully addressable ones); one process calls this.

    `tokenizer` is a `bert_jax.tokenization` tokenizer; its `save(dir)` writes its files.
    `extra_files`: {name: text} written beside them (a converted model's settings).
    """
    params = jax.tree.map(np.asarray, to_unscanned(params))
    with atomic_directory(path, overwrite) as tmp:
        # One process writes a model directory alone (in a multi-process job the caller
        # picks which one), so Orbax must not wait for the others at its barriers.
        # A stop waits for the end of the write: Orbax's writer threads would go on filling the
        # temporary folder that the stop removes.
        me = jax.process_index()
        with stopping.deferred_stops(), ocp.StandardCheckpointer(multiprocessing_options=(
                ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me}))) \
                as checkpointer:
            checkpointer.save(paths.join(tmp, MODEL_DIRECTORY.params), params)
        write_model_files(tmp, config, tokenizer=tokenizer, task=task)
        for name, text in (extra_files or {}).items():
            paths.write_text(paths.join(tmp, name), text)


# --- reading ----------------------------------------------------------------------------

def read_model_params(directory: str | os.PathLike) -> dict[str, Any]:
    """A model directory's params/ as host numpy arrays."""
    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpoint.array_tree(directory)
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    return checkpointer.restore(directory, args=ocp.args.PyTreeRestore(
        restore_args=restore_args))


def _read_model_file(model_file: str) -> dict[str, Any]:
    meta = encoding.read_json(model_file)
    try:
        return {"config": BertConfig.from_dict(meta["model"]), "task": meta.get("task")}
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{model_file}: malformed ({e})") from None


def read_model_dir(directory: str) -> Pretrained:
    """A model directory as it is on disk, with no resolving.

    For a job reading back what it wrote itself, such as a fine-tune's WORKDIR/best."""
    meta = _read_model_file(paths.join(directory, MODEL_DIRECTORY.config))
    params = read_model_params(paths.join(directory, MODEL_DIRECTORY.params))
    return Pretrained(meta["config"], params, meta["task"], directory)


def read_model_config(workdir: str) -> BertConfig:
    """The model config a pretraining workdir recorded (WORKDIR/model/bert_jax.json)."""
    path = paths.join(paths.abspath(workdir), PRETRAINING_WORKDIR.model, MODEL_DIRECTORY.config)
    if not paths.exists(path):
        raise CheckpointError(workdir_state.no_model_message(workdir))
    return _read_model_file(path)["config"]


def load_pretrained_from_workdir(workdir: str) -> Pretrained:
    """The latest readable checkpoint of a pretraining workdir as a `Pretrained`.

    Numpy params with unrolled layers, the model config, the tokenizer dir."""
    workdir = paths.abspath(workdir)
    config = read_model_config(workdir)
    params = checkpoint.latest_params(workdir)
    # An ELECTRA run's model is its discriminator; the generator trained beside it is
    # WORKDIR/generator (`pretrain.electra`).
    params.pop("generator", None)
    # A distilled run's projection to its teacher's width is the run's, not the model's.
    params.pop(matching.PROJECTION, None)
    return Pretrained(config, to_unscanned(params), None,
                      paths.join(workdir, PRETRAINING_WORKDIR.model))


def best_model_dir(workdir: str) -> str:
    """A fine-tuning workdir's WORKDIR/best, or for several runs the selected run's.

    Several runs: seeds, a grid (see `finetune.selection`)."""
    results = paths.join(workdir, FINETUNING_WORKDIR.results)
    if not paths.isdir(paths.join(workdir, FINETUNING_WORKDIR.best)) and paths.exists(results):
        best_run = encoding.read_json(results).get("best_run")
        if best_run is not None:
            return paths.join(workdir, best_run, FINETUNING_WORKDIR.best)
    path = paths.join(workdir, FINETUNING_WORKDIR.best)
    if not paths.isdir(path):
        raise FileNotFoundError(workdir_state.no_model_message(workdir))
    return path


# --- what the user points at -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelRef:
    """A model the user pointed at, resolved (`open_model`) and its config read.

    Its parameters are read by `load`.

    path: as the user gave it (messages name it). kind: `folders.MODEL` (a model
    directory, also a Hub model's converted one or a fine-tuning workdir's kept model),
    `PRETRAINING` (a pretraining workdir: its latest checkpoint) or `FINETUNING` (the
    kept model of that workdir). directory: the model directory or pretraining workdir
    that holds the parameters."""

    path: str
    kind: str
    directory: str
    config: BertConfig
    task: dict[str, Any] | None

    @property
    def tokenizer_dir(self) -> str:
        return (paths.join(self.directory, PRETRAINING_WORKDIR.model)
                if self.kind == folders.PRETRAINING else self.directory)

    def load(self) -> Pretrained:
        """The parameters (numpy, unrolled layers) with the config, task and tokenizer."""
        if self.kind == folders.PRETRAINING:
            model = load_pretrained_from_workdir(self.directory)
        else:
            params = read_model_params(paths.join(self.directory, MODEL_DIRECTORY.params))
            model = Pretrained(self.config, params, self.task, self.directory)
        check_finite(model.params, self.path)
        check_tokenizer(model, self.path)
        return model


def resolve_model_dir(path: str) -> tuple[str, str]:
    """(directory, kind) of what `path` names.

    A Hub model by name as its converted model directory, a fine-tuning workdir as its kept model, a
    model directory or pretraining workdir as itself."""
    path = paths.abspath(local_path(path))
    if not paths.isdir(path):
        raise FileNotFoundError(workdir_state.no_model_message(path))
    if paths.exists(paths.join(path, MODEL_DIRECTORY.config)):
        return path, folders.MODEL
    kind = folders.kind_of(path)
    if kind in (folders.FINETUNING, folders.DISTILLATION):
        best = best_model_dir(path)
        _note_running(path, f"{best[len(path) + 1:]}/")  # best/ or seed_N/best/
        return best, folders.FINETUNING
    if paths.isdir(paths.join(path, TRAINING_WORKDIR.checkpoints)):
        _note_running(path, "its latest checkpoint")
        return path, folders.PRETRAINING
    raise FileNotFoundError(workdir_state.no_model_message(path))


def _note_running(workdir: str, kept: str) -> None:
    """One warning when a run is still writing `workdir`: it is read as it is now."""
    note = workdir_state.running_note(workdir, kept)
    if note is not None:
        logging.getLogger("bert_jax").warning("%s", note)


def open_model(path: str | os.PathLike) -> ModelRef:
    """The one resolver of a model path, run where a command starts.

    A model directory, a pretraining workdir (its latest checkpoint), a fine-tuning workdir
    (its kept model) or a Hub model by name (`hf:ORG/NAME[@REVISION]`, fetched and converted once).
    Reads the config, checks that there are parameters to read, reads none of them."""
    path = str(path)
    directory, kind = resolve_model_dir(path)
    if kind == folders.PRETRAINING:
        if not checkpoint.steps(directory):
            raise CheckpointError(workdir_state.no_model_message(directory))
        return ModelRef(path, kind, directory, read_model_config(directory), None)
    meta = _read_model_file(paths.join(directory, MODEL_DIRECTORY.config))
    return ModelRef(path, kind, directory, meta["config"], meta["task"])


class NonFiniteParamsError(CheckpointError):
    """A model whose parameters hold NaN or Inf.

    A corrupted file (compression does not notice a flipped byte) or a diverged run. Every output
    computed from it is meaningless."""


def check_finite(params: dict[str, Any], source: str) -> None:
    """Raises NonFiniteParamsError naming `source` and the first parameter holding NaN/Inf.

    It says how many such values it holds. One reduction per floating-point leaf."""
    bad = {name: leaf for name, leaf in _flat(params).items()
           if jax.numpy.issubdtype(np.asarray(leaf).dtype, jax.numpy.inexact)  # bfloat16 too
           and not np.isfinite(leaf).all()}
    if bad:
        name, leaf = next(iter(bad.items()))
        count = np.size(leaf) - int(np.count_nonzero(np.isfinite(leaf)))
        others = f" (and {len(bad) - 1} more parameters)" if len(bad) > 1 else ""
        raise NonFiniteParamsError(
            f"{source}: {count:,} NaN/Inf values in parameter {name}{others}: the file is "
            "corrupt or the run diverged; restore or recreate the model before using it")


def check_tokenizer(model: Pretrained, source: str) -> None:
    """Raises UserError when the tokenizer beside `model` does not fit its embeddings.

    That is, it cannot be the one they were trained for (its files replaced, or another model's):
    more ids than vocabulary rows (`check_inputs_fit`; a table padded larger than the vocabulary, as
    ModernBERT's, is fine), or a fingerprint other than the one its bert_jax.json recorded
    (models saved since it records one). A model without a tokenizer is not checked."""
    directory = model.tokenizer_dir
    if not has_tokenizer(directory):
        return
    tokenizer = load_tokenizer(directory)
    check_inputs_fit(model.config, source, vocab_size=tokenizer.vocab_size)
    model_file = paths.join(directory, MODEL_DIRECTORY.config)
    recorded = (encoding.read_json(model_file).get("vocabulary")
                if paths.isfile(model_file) else None)
    if recorded and tokenizer.fingerprint() != recorded:
        raise UserError(f"{source}: the tokenizer in {directory} is not the one the model was "
                        "saved with (its vocabulary differs: were its files replaced?); "
                        "restore them")


def load(path: str | os.PathLike | ModelRef) -> Pretrained:
    """Reads the model `path` names (anything `open_model` takes), parameters included."""
    return (path if isinstance(path, ModelRef) else open_model(path)).load()


def model_config(path: str) -> BertConfig:
    """The config of the model `path` names, converting nothing.

    A Hub model's from its `config.json` when it has not been converted yet (`bert-jax compile`
    sizes a run from it)."""
    from bert_jax.weights import hf, hub

    if hub.hub_name(path) is not None:
        hf_dir, converted = hub.fetch(str(path))
        if not paths.exists(paths.join(converted, MODEL_DIRECTORY.config)):
            return hf.hf_config(paths.join(hf_dir, "config.json"))[0]
    return open_model(path).config


# --- converted models, and models by name --------------------------------------------

def save_converted(tokenizer, source: str, config: BertConfig, params: dict[str, Any],
                   out: str, task: dict[str, Any] | None, overwrite: bool,
                   extra_files: dict[str, str] | None = None) -> Pretrained:
    """Writes a converted checkpoint with its tokenizer (read from `source`).

    The tokenizer must have the config's vocabulary size."""
    if tokenizer.vocab_size != config.vocab_size:
        raise UserError(f"{source} has {tokenizer.vocab_size} tokens but the config says "
                        f"vocab_size={config.vocab_size}")
    save(out, config, params, tokenizer=tokenizer, task=task, overwrite=overwrite,
         extra_files=extra_files)
    return Pretrained(config, params, task, out)


def convert_hf_dir(hf_dir: str, out: str, overwrite: bool = False) -> Pretrained:
    """Converts an HF directory, or a Hub model by name, to a model directory.

    The directory is of a family bert_jax reads (config.json, weights, the tokenizer's files; a
    sentence-transformers model's pooling)."""
    from bert_jax.weights import hf, hub, sentence_embedding

    if hub.hub_name(hf_dir) is not None:
        hf_dir = hub.fetch(str(hf_dir))[0]
    config, params = hf.load_hf_dir(hf_dir)
    check_finite(params, hf_dir)
    tokenizer, source = hf.hf_tokenizer(hf_dir)
    settings, notes = sentence_embedding.read_hf_settings(hf_dir)
    for note in notes:
        logging.getLogger("bert_jax").warning("%s: %s", hf_dir, note)
    extra = {sentence_embedding.SETTINGS_FILE: json.dumps(settings, indent=2)} \
        if settings else None
    dense = settings and sentence_embedding.dense_file(hf_dir, settings, config.hidden_size)
    if dense:
        extra[sentence_embedding.DENSE_FILE] = dense
    return save_converted(tokenizer, source, config, params, out, hf.hf_task(hf_dir),
                          overwrite, extra)


def is_hub_name(path: str | os.PathLike) -> bool:
    """Whether `path` names a Hub model (`hf:ORG/NAME`, or `ORG/NAME` that is no local path)."""
    from bert_jax.weights import hub

    return hub.hub_name(path) is not None


def local_path(path: str | os.PathLike) -> str:
    """`path` itself, or for a Hub model by name its model directory.

    Fetched and converted on first use, then read from the cache
    (CACHE/models--ORG--NAME/bert_jax/COMMIT)."""
    from bert_jax.weights import hub

    if hub.hub_name(path) is None:
        return str(path)
    hf_dir, converted = hub.fetch(str(path))
    if not paths.exists(paths.join(converted, MODEL_DIRECTORY.config)):
        convert_hf_dir(hf_dir, converted, overwrite=True)
    return converted


# --- task metadata ----------------------------------------------------------------------

# Older records name a fine-tuning family instead of a head kind.
_FAMILY_KINDS = {"classification": "classification", "tagging": "tagging", "squad": "span"}


def task_head(task: dict[str, Any] | None, params: dict[str, Any]) -> task_heads.Head:
    """The head of a model with this task record and these parameters.

    The one the record states (`task_heads.Head.from_record`), or for a record without one
    (fine-tuned by 0.1 or 0.2, converted, or none) the head inferred here, the one place that reads
    it back from the record's other entries and the parameters."""
    return task_heads.Head.from_record(task) or _inferred_head(task or {}, params)


def _inferred_head(task: dict[str, Any], params: dict[str, Any]) -> task_heads.Head:
    """An older record's `kind` or fine-tuning `family` (a tagger with `crf`).

    Without either, the head in `params` (a classifier with a pooler is a sequence classifier). The
    width of the head's output layer gives its labels (one: a regression)."""
    kind = task.get("kind") or _FAMILY_KINDS.get(task.get("family"))
    if kind is None:
        if "qa_outputs" in params:
            kind = "span"
        elif "classifier" in params:
            kind = "classification" if "pooler" in params["bert"] else "tagging"
        else:
            kind = task_heads.ENCODER
    if kind == "tagging" and task.get("crf"):
        kind = "crf_tagging"
    param = task_heads.Head(kind).entry.param
    num_labels = int(np.shape(params[param]["kernel"])[-1]) if param in params else None
    if kind == "classification" and num_labels == 1:
        kind = "regression"
    pooling = None
    if task_heads.HEADS[kind].classifies_sequences:  # older runs: the pooler
        pooling = (task.get("config") or {}).get("pooling", "pooler")
    return task_heads.Head(kind, num_labels, pooling)


def label_names(task: dict[str, Any] | None) -> list[str] | None:
    """Label names as the fine-tuning task or a converted one recorded them.

    The task records `label_names`, a converted one `labels`."""
    names = (task or {}).get("label_names") or (task or {}).get("labels")
    return [str(n) for n in names] if names else None


# --- placing loaded weights -------------------------------------------------------------

def _flat(tree: Any) -> dict[str, Any]:
    return {"/".join(str(getattr(k, "key", k)) for k in path): leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def match_params(loaded: Any, target: Any, *, partial: bool = False,
                 source: str = "checkpoint", missing_hint: str = "") -> Any:
    """`loaded` numpy params arranged like `target` (arrays or ShapeDtypeStructs).

    Missing, extra or mis-shaped parameters raise CheckpointError naming them;
    with `partial=True` missing ones are filled from `target` (which must then hold
    arrays) and extra ones dropped, but shapes must still match. `missing_hint` ends
    the error when parameters are missing (the caller's way to allow it).
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
        raise CheckpointError(f"parameters of {source} do not match the model; "
                              + "; ".join(problems) + (missing_hint if missing else ""))
    treedef = jax.tree.structure(target)
    return jax.tree.unflatten(treedef, [have.get(k, leaf) for k, leaf in want.items()])


def init_params(target: Any, loaded: dict[str, Any], shardings: Any = None, *,
                drop: tuple[str, ...] = (), partial: bool = False,
                source: str = "checkpoint", missing_hint: str = "") -> Any:
    """Loaded weights as the parameters of the model whose parameter tree `target` is.

    The weights are `load(path).params`, or its "bert" encoder; `target` holds arrays or
    ShapeDtypeStructs. They are placed with `shardings` (a tree like `target` of
    `jax.sharding.Sharding`s; None: the default device). Every run that starts from pretrained
    weights comes through here.

    drop: top-level entries of `loaded` left out when `target` has none (heads the run
    does not use: an MLM-only run's NSP head, the pooler of a tagger). Layers are stacked
    or unrolled as `target` holds them; then everything must match (`match_params`,
    which says what `partial` allows)."""
    loaded = {k: v for k, v in loaded.items() if k in target or k not in drop}
    scanned = "layers" in encoder_of(target)
    params = match_params(match_layout(loaded, scanned), target, partial=partial, source=source,
                          missing_hint=missing_hint)
    return jax.device_put(params, shardings)
