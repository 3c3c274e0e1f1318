"""Model directories: the unit `convert` writes and `embed`, `finetune`, `predict` and
`export` read. This module is the one place that reads and writes them.

    MODEL_DIR/
      bert_jax.json     {"model": BertConfig fields, "task": {...} or null}
      vocab.txt | spm.model, tokenizer_config.json   (the tokenizer's own files)
      params/           Orbax checkpoint of the parameter tree (unrolled layers)

A model published on the Hugging Face Hub is accepted wherever a model directory is, by
name: `hf:ORG/NAME[@REVISION]` (or `ORG/NAME` where no such local path exists), fetched
(`bert_jax.weights.hub`) and converted once into the cache beside it (`local_path`).

A pretraining workdir (its checkpoints written by `bert-jax pretrain` in the layout
`bert_jax.train.checkpoint` owns, its model files in WORKDIR/model) is accepted wherever a model
directory is: its latest readable checkpoint's params are read. A fine-tuning workdir
resolves to its best model (`resolve_model_dir`). Writes are atomic: a failed
conversion leaves nothing at the destination.

Also here, because every reader of a model directory needs them: the task metadata
(`task_kind`, `label_names`, `classifier_pooling`) and `init_params`, which fits loaded
numpy weights to a model, in either layer layout (`bert_jax.models.layer_layout`), and places
them on its mesh.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from bert_jax.errors import CheckpointError
from bert_jax.host import paths
from bert_jax.host.atomic import atomic_directory
from bert_jax.models.config import BertConfig, ConfigError
from bert_jax.models.layer_layout import encoder_of, match_layout, to_unscanned
from bert_jax.train import checkpoint

MODEL_FILE = "bert_jax.json"
PARAMS_DIR = "params"
# A pretraining workdir's model files (its checkpoints: `bert_jax.train.checkpoint`).
WORKDIR_MODEL_DIR = "model"
# A fine-tuning workdir: its best model, and the results naming the best seed.
BEST_DIR = "best"
RESULTS_FILE = "eval_results.json"


@dataclasses.dataclass
class Pretrained:
    """A loaded model: config, parameters (numpy, unrolled layers), optional task
    description (e.g. {"name": "sst2", "num_labels": 2, ...}) and the directory holding
    the tokenizer files."""

    config: BertConfig
    params: dict[str, Any]
    task: dict[str, Any] | None
    tokenizer_dir: str


# --- writing ----------------------------------------------------------------------------

def write_model_files(directory: str | os.PathLike, config: BertConfig, *, tokenizer=None,
                      task: dict[str, Any] | None = None) -> None:
    """`bert_jax.json` (the config with unrolled layers, the task) and the tokenizer's files
    into `directory` (created). One process calls this."""
    paths.makedirs(directory)
    paths.write_text(paths.join(directory, MODEL_FILE), json.dumps(
        {"model": config.replace(scan_layers=False).to_dict(), "task": task},
        indent=2, sort_keys=True))
    if tokenizer is not None:
        tokenizer.save(directory)


def save(path: str | os.PathLike, config: BertConfig, params: dict[str, Any], *,
         tokenizer=None, task: dict[str, Any] | None = None, overwrite: bool = False) -> None:
    """Writes a model directory atomically (into a temporary sibling, then renamed).
    `params` are host arrays (or fully addressable ones); one process calls this.

    `tokenizer` is a `bert_jax.tokenization` tokenizer; its `save(dir)` writes its files.
    """
    params = jax.tree.map(np.asarray, to_unscanned(params))
    with atomic_directory(path, overwrite) as tmp:
        # One process writes a model directory alone (in a multi-process job the caller
        # picks which one), so Orbax must not wait for the others at its barriers.
        me = jax.process_index()
        checkpointer = ocp.StandardCheckpointer(multiprocessing_options=(
            ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})))
        checkpointer.save(paths.join(tmp, PARAMS_DIR), params)
        checkpointer.wait_until_finished()
        write_model_files(tmp, config, tokenizer=tokenizer, task=task)


# --- reading ----------------------------------------------------------------------------

def read_model_params(directory: str | os.PathLike) -> dict[str, Any]:
    """A model directory's params/ as host numpy arrays."""
    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpointer.metadata(directory).item_metadata.tree
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    return checkpointer.restore(directory, args=ocp.args.PyTreeRestore(
        restore_args=restore_args))


def _read_model_file(model_file: str) -> dict[str, Any]:
    meta = json.loads(paths.read_text(model_file))
    try:
        return {"config": BertConfig.from_dict(meta["model"]), "task": meta.get("task")}
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{model_file}: malformed ({e})") from None


def read_model_config(workdir: str) -> BertConfig:
    """The model config a pretraining workdir recorded (WORKDIR/model/bert_jax.json)."""
    path = paths.join(paths.abspath(workdir), WORKDIR_MODEL_DIR, MODEL_FILE)
    if not paths.exists(path):
        raise CheckpointError(f"{path} not found: not a bert-jax pretraining workdir")
    return _read_model_file(path)["config"]


def load_pretrained_from_workdir(workdir: str) -> Pretrained:
    """The latest readable checkpoint of a pretraining workdir as a `Pretrained`
    (numpy params with unrolled layers, the model config, the tokenizer dir)."""
    workdir = paths.abspath(workdir)
    config = read_model_config(workdir)
    params = checkpoint.latest_params(workdir)
    return Pretrained(config, to_unscanned(params), None, paths.join(workdir, WORKDIR_MODEL_DIR))


def check_model_path(path: str | os.PathLike) -> bool:
    """Raises what `load` would for a path that holds no model, reading no parameters
    (a run checks its init_from before writing anything). True for a pretraining
    workdir, False for a model directory."""
    path = paths.abspath(local_path(path))
    if not paths.isdir(path):
        raise FileNotFoundError(f"no model directory at {path}")
    model_file = paths.join(path, MODEL_FILE)
    checkpoints = paths.join(path, checkpoint.CHECKPOINTS_DIR)
    if paths.isdir(checkpoints) and not paths.exists(model_file):
        read_model_config(path)
        if not checkpoint.steps(path):
            raise CheckpointError(f"no checkpoint under {checkpoints}")
        return True
    if not paths.exists(model_file):
        hint = (" It is a fine-tuning workdir: its model is in best/." if
                paths.isdir(paths.join(path, BEST_DIR)) else "")
        raise FileNotFoundError(
            f"{path} is neither a bert_jax model directory (no {MODEL_FILE}) nor a pretraining "
            f"workdir (no checkpoints/).{hint} Convert published weights with `bert-jax "
            "convert`.")
    _read_model_file(model_file)
    return False


def tokenizer_dir(path: str | os.PathLike) -> str:
    """Where the tokenizer of a model directory or pretraining workdir is (`load`'s
    tokenizer_dir), reading no parameters."""
    path = paths.abspath(local_path(path))
    return paths.join(path, WORKDIR_MODEL_DIR) if check_model_path(path) else path


def load(path: str | os.PathLike) -> Pretrained:
    """Reads a model directory, a pretraining workdir (its latest checkpoint) or a Hub
    model by name."""
    path = paths.abspath(local_path(path))
    if check_model_path(path):
        return load_pretrained_from_workdir(path)
    model_file = paths.join(path, MODEL_FILE)
    meta = _read_model_file(model_file)
    params = read_model_params(paths.join(path, PARAMS_DIR))
    return Pretrained(meta["config"], params, meta["task"], path)


def best_model_dir(workdir: str) -> str:
    """A fine-tuning workdir's WORKDIR/best, or for several runs (seeds, a grid: see
    `finetune.selection`) the selected run's."""
    results = paths.join(workdir, RESULTS_FILE)
    if not paths.isdir(paths.join(workdir, BEST_DIR)) and paths.exists(results):
        best_run = json.loads(paths.read_text(results)).get("best_run")
        if best_run is not None:
            return paths.join(workdir, best_run, BEST_DIR)
    path = paths.join(workdir, BEST_DIR)
    if not paths.isdir(path):
        raise FileNotFoundError(f"{workdir} holds no fine-tuned model ({BEST_DIR}/ is missing); "
                                "run `bert-jax finetune --workdir` first")
    return path


def resolve_model_dir(path: str) -> str:
    """A model directory or pretraining workdir as is; a fine-tuning workdir's best model;
    a Hub model by name as its converted model directory."""
    path = local_path(path)
    if any(paths.exists(paths.join(path, name)) for name in (MODEL_FILE,
                                                             checkpoint.CHECKPOINTS_DIR)):
        return path
    return best_model_dir(path)


# --- converted models, and models by name --------------------------------------------

def save_converted(tokenizer, source: str, config: BertConfig, params: dict[str, Any],
                   out: str, task: dict[str, Any] | None, overwrite: bool) -> Pretrained:
    """Writes a converted checkpoint with its tokenizer (read from `source`), which must
    have the config's vocabulary size."""
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{source} has {tokenizer.vocab_size} tokens but the config says "
                         f"vocab_size={config.vocab_size}")
    save(out, config, params, tokenizer=tokenizer, task=task, overwrite=overwrite)
    return Pretrained(config, params, task, out)


def convert_hf_dir(hf_dir: str, out: str, overwrite: bool = False) -> Pretrained:
    """Converts an HF BERT or ALBERT directory (config.json, weights, and vocab.txt or
    ALBERT's spiece.model), or a Hub model by name, to a model directory."""
    from bert_jax.weights import hf, hub

    if hub.hub_name(hf_dir) is not None:
        hf_dir = hub.fetch(str(hf_dir))[0]
    config, params = hf.load_hf_dir(hf_dir)
    tokenizer, source = hf.hf_tokenizer(hf_dir)
    return save_converted(tokenizer, source, config, params, out, hf.hf_task(hf_dir), overwrite)


def local_path(path: str | os.PathLike) -> str:
    """`path` itself, or for a Hub model by name its model directory: fetched and converted
    on first use, then read from the cache (CACHE/models--ORG--NAME/bert_jax/COMMIT)."""
    from bert_jax.weights import hub

    if hub.hub_name(path) is None:
        return str(path)
    hf_dir, converted = hub.fetch(str(path))
    if not paths.exists(paths.join(converted, MODEL_FILE)):
        convert_hf_dir(hf_dir, converted, overwrite=True)
    return converted


# --- task metadata ----------------------------------------------------------------------

_FAMILY_KINDS = {"classification": "classification", "tagging": "tagging", "squad": "span"}


def task_kind(task: dict[str, Any] | None, params: dict[str, Any]) -> str:
    """classification | regression | tagging | span | multiple_choice | encoder.

    Reads `task["kind"]` or the fine-tuning `task["family"]`; without a task, the head in
    `params` decides (a classifier with a pooler is a sequence classifier)."""
    task = task or {}
    kind = task.get("kind") or _FAMILY_KINDS.get(task.get("family"))
    if kind is None:
        if "qa_outputs" in params:
            kind = "span"
        elif "classifier" in params:
            kind = "classification" if "pooler" in params["bert"] else "tagging"
        else:
            return "encoder"
    if kind == "classification" and "classifier" in params and \
            np.shape(params["classifier"]["kernel"])[-1] == 1:
        return "regression"
    return kind


def classifier_pooling(task: dict[str, Any] | None) -> str:
    """The sequence classifier's pooling as fine-tuning recorded it (older runs: pooler)."""
    return ((task or {}).get("config") or {}).get("pooling", "pooler")


def label_names(task: dict[str, Any] | None) -> list[str] | None:
    """Label names as the fine-tuning task (`label_names`) or a converted one (`labels`)
    recorded them."""
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
    """Loaded weights (`load(path).params`, or its "bert" encoder) as the parameters of
    the model whose parameter tree `target` is (arrays or ShapeDtypeStructs), placed with
    `shardings` (a tree like `target` of `jax.sharding.Sharding`s; None: the default
    device). Every run that starts from pretrained weights comes through here.

    drop: top-level entries of `loaded` left out when `target` has none (heads the run
    does not use: an MLM-only run's NSP head, the pooler of a tagger). Layers are stacked
    or unrolled as `target` holds them; then everything must match (`match_params`,
    which says what `partial` allows)."""
    loaded = {k: v for k, v in loaded.items() if k in target or k not in drop}
    scanned = "layers" in encoder_of(target)
    params = match_params(match_layout(loaded, scanned), target, partial=partial, source=source,
                          missing_hint=missing_hint)
    return jax.device_put(params, shardings)
