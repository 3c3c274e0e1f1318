"""Model directories: the unit `convert` writes and `embed`, `finetune`,
`predict` and `export` read.

    MODEL_DIR/
      bert_jax.json     {"model": BertConfig fields, "task": {...} or null}
      vocab.txt | spm.model, tokenizer_config.json   (the tokenizer's own files)
      params/           Orbax checkpoint of the parameter tree (unrolled layers)

A pretraining workdir (`WORKDIR/checkpoints/...` written by `bert-jax pretrain`)
is accepted wherever a model directory is: its latest checkpoint's params are read.
Writes are atomic: a failed conversion leaves nothing at the destination.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from bert_jax.atomic import atomic_directory
from bert_jax.config import BertConfig, ConfigError
from bert_jax.convert import layout

MODEL_FILE = "bert_jax.json"
PARAMS_DIR = "params"


@dataclasses.dataclass
class Pretrained:
    """A loaded model: config, parameters (numpy, unrolled layers), optional task
    description (e.g. {"name": "sst2", "num_labels": 2, ...}) and the directory holding
    the tokenizer files."""

    config: BertConfig
    params: dict[str, Any]
    task: dict[str, Any] | None
    tokenizer_dir: str


def save(path: str | os.PathLike, config: BertConfig, params: dict[str, Any], *,
         tokenizer=None, task: dict[str, Any] | None = None, overwrite: bool = False) -> None:
    """Writes a model directory atomically (into a temporary sibling, then renamed).
    `params` are host arrays (or fully addressable ones); one process calls this.

    `tokenizer` is a `bert_jax.tokenization` tokenizer; its `save(dir)` writes its files.
    """
    params = jax.tree.map(np.asarray, layout.to_unscanned(params))
    with atomic_directory(path, overwrite) as tmp:
        # One process writes a model directory alone (in a multi-process job the caller
        # picks which one), so Orbax must not wait for the others at its barriers.
        me = jax.process_index()
        checkpointer = ocp.StandardCheckpointer(multiprocessing_options=(
            ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})))
        checkpointer.save(os.path.join(tmp, PARAMS_DIR), params)
        checkpointer.wait_until_finished()
        with open(os.path.join(tmp, MODEL_FILE), "w", encoding="utf-8") as f:
            json.dump({"model": config.replace(scan_layers=False).to_dict(), "task": task}, f,
                      indent=2, sort_keys=True)
        if tokenizer is not None:
            tokenizer.save(tmp)


def read_params(params_dir: str | os.PathLike) -> dict[str, Any]:
    """Restores an Orbax parameter tree as host numpy arrays (any saved device count)."""
    checkpointer = ocp.PyTreeCheckpointer()
    metadata = checkpointer.metadata(params_dir).item_metadata.tree
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), metadata)
    return checkpointer.restore(params_dir, args=ocp.args.PyTreeRestore(
        restore_args=restore_args))


def load(path: str | os.PathLike) -> Pretrained:
    """Reads a model directory or a pretraining workdir (its latest checkpoint)."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no model directory at {path}")
    if os.path.isdir(os.path.join(path, "checkpoints")) and not os.path.exists(
            os.path.join(path, MODEL_FILE)):
        from bert_jax import checkpoint  # a pretraining workdir
        return checkpoint.load_pretrained_from_workdir(path)
    model_file = os.path.join(path, MODEL_FILE)
    if not os.path.exists(model_file):
        raise FileNotFoundError(
            f"{path} is neither a bert_jax model directory (no {MODEL_FILE}) nor a pretraining "
            "workdir (no checkpoints/). Convert published weights with `bert-jax convert`.")
    with open(model_file, encoding="utf-8") as f:
        meta = json.load(f)
    try:
        config = BertConfig.from_dict(meta["model"])
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{model_file}: malformed ({e})") from None
    params = read_params(os.path.join(path, PARAMS_DIR))
    return Pretrained(config, params, meta.get("task"), path)
