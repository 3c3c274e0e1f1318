"""Google's original TF1 BERT checkpoints to our parameter trees.

A checkpoint is `bert_model.ckpt.*` + `bert_config.json` + `vocab.txt`.

Each TF1 variable name maps one-to-one onto an HF tensor name, so the
conversion renames the variables and hands them to `params_from_hf`; the
checks before that speak in TF variable names, which is what the user sees in
their checkpoint. TF1 dense kernels are [in, out] (torch stores [out, in]);
`output_weights` of the NSP, classifier and SQuAD heads are already [out, in].
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Mapping

import numpy as np

from bert_jax.errors import UserError
from bert_jax.models.config import BertConfig
from bert_jax.models.task_heads import Head
from bert_jax.weights import hf
from bert_jax.weights.config_json import read_config_file
from bert_jax.weights.hf import CheckpointMismatchError

# Training state in Google's checkpoints that is not part of the model.
_OPTIMIZER_SUFFIXES = ("/adam_m", "/adam_v", "/lamb_m", "/lamb_v")
_TRAINING_VARIABLES = ("global_step", "good_steps", "loss_scale", "current_loss_scale")

# Head tensors whose TF1 names do not follow the scope pattern of the encoder.
_HF_TO_TF1_SPECIAL = {
    "cls.predictions.bias": "cls/predictions/output_bias",
    "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
    "cls.seq_relationship.bias": "cls/seq_relationship/output_bias",
    "classifier.weight": "output_weights",      # run_classifier.py
    "classifier.bias": "output_bias",
    "qa_outputs.weight": "cls/squad/output_weights",  # run_squad.py
    "qa_outputs.bias": "cls/squad/output_bias",
}


def tf1_name(hf_name: str) -> tuple[str, bool]:
    """HF tensor name -> (TF1 variable name, whether the TF1 value is the transpose)."""
    if hf_name in _HF_TO_TF1_SPECIAL:
        return _HF_TO_TF1_SPECIAL[hf_name], False
    if hf_name.startswith("bert.embeddings.") and hf_name.endswith("_embeddings.weight"):
        return hf_name[:-len(".weight")].replace(".", "/"), False
    scope, leaf = hf_name.rsplit(".", 1)
    scope = re.sub(r"\.layer\.(\d+)\.", r".layer_\1.", scope).replace(".", "/")
    if scope.endswith("LayerNorm"):
        return f"{scope}/{'gamma' if leaf == 'weight' else 'beta'}", False
    return f"{scope}/{'kernel' if leaf == 'weight' else 'bias'}", leaf == "weight"


def is_training_variable(name: str) -> bool:
    """Optimizer slots and step counters, which a conversion skips."""
    return name.endswith(_OPTIMIZER_SUFFIXES) or name.split("/")[-1] in _TRAINING_VARIABLES


def find_checkpoint(path: str | os.PathLike) -> str:
    """The checkpoint prefix in a directory (`DIR/bert_model.ckpt`), or `path` if it is one.

    `path` itself is returned when it is already a prefix (`.../model.ckpt-1000`)."""
    path = os.fspath(path)
    if os.path.exists(path + ".index"):
        return path
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no TF checkpoint at {path} (no {path}.index)")
    indexes = sorted(glob.glob(os.path.join(path, "*.index")))
    preferred = os.path.join(path, "bert_model.ckpt.index")
    if preferred in indexes:
        return preferred[:-len(".index")]
    if len(indexes) == 1:
        return indexes[0][:-len(".index")]
    if not indexes:
        data = glob.glob(os.path.join(path, "*.data-*"))
        hint = f" ({os.path.basename(data[0])} is there but its .index file is missing)" \
            if data else ""
        raise FileNotFoundError(f"no TF checkpoint index (*.index) in {path}{hint}")
    raise UserError(f"several checkpoints in {path}: "
                    f"{', '.join(os.path.basename(i) for i in indexes)}; pass the prefix")


def read_variables(prefix: str) -> dict[str, np.ndarray]:
    """Every model variable of a TF checkpoint as numpy, training state left out.

    Raises CheckpointMismatchError naming the file or the variable that cannot be read.
    """
    from bert_jax.host.tf_host import tensorflow
    tf = tensorflow("reading a TensorFlow checkpoint")
    try:
        reader = tf.train.load_checkpoint(prefix)
        names = sorted(n for n in reader.get_variable_to_shape_map()
                       if not is_training_variable(n))
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointMismatchError(f"cannot read TF checkpoint {prefix}: "
                                      f"{_first_line(e)}") from None
    variables = {}
    for name in names:
        try:
            variables[name] = np.asarray(reader.get_tensor(name))
        except Exception as e:  # TF raises OpError, IndexError, ... for damaged shards
            raise CheckpointMismatchError(f"cannot read variable {name} from {prefix}: "
                                          f"{_first_line(e)}") from None
    return variables


def _first_line(error: Exception) -> str:
    """TF's messages bury the cause in a long status string; its first line says it."""
    return (getattr(error, "message", None) or str(error)).strip().splitlines()[0]


def _heads(names) -> dict[str, Any]:
    """Which heads a set of TF1 variable names holds, in `hf._entries` terms."""
    heads: dict[str, Any] = {}
    if "bert/pooler/dense/kernel" in names:
        heads["pooler"] = True
    if any(n.startswith("cls/predictions/") for n in names):
        heads["mlm"] = True
    if any(n.startswith("cls/seq_relationship/") for n in names):
        heads["nsp"] = True
    if any(n.startswith("cls/squad/") for n in names):
        heads["qa_outputs"] = True
    return heads


def hf_state_from_tf1(variables: Mapping[str, np.ndarray], config: BertConfig
                      ) -> dict[str, np.ndarray]:
    """TF1 variables -> HF state dict (torch layout).

    Raises CheckpointMismatchError naming every unknown, missing or mis-shaped TF variable.
    """
    heads = _heads(variables)
    if "output_weights" in variables:
        heads["classifier"] = int(np.shape(variables["output_weights"])[0])
    expected = {}
    for entry in hf._entries(config, heads):
        name, transposed = tf1_name(entry.hf_name)
        shape = entry.hf_shape[::-1] if transposed else entry.hf_shape
        expected[name] = (entry.hf_name, transposed, tuple(shape))
    problems = [f"unknown variable {n}" for n in sorted(set(variables) - set(expected))]
    problems += [f"missing variable {n}" for n in sorted(set(expected) - set(variables))]
    problems += [f"variable {n} has shape {tuple(np.shape(variables[n]))}, the config implies "
                 f"{shape}" for n, (_, _, shape) in expected.items()
                 if n in variables and tuple(np.shape(variables[n])) != shape]
    if problems:
        raise CheckpointMismatchError("TF checkpoint does not match bert_config.json:\n  "
                                      + "\n  ".join(problems))
    return {hf_name: (variables[n].T if transposed else variables[n])
            for n, (hf_name, transposed, _) in expected.items()}


def params_from_tf1(variables: Mapping[str, np.ndarray], config: BertConfig) -> dict[str, Any]:
    """TF1 variables -> our parameter tree (laid out for `config.scan_layers`)."""
    return hf.params_from_hf(hf_state_from_tf1(variables, config), config)


def task_of(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The task a fine-tuned TF1 checkpoint was trained for, from its head.

    Its head is run_squad's or run_classifier's (Google's releases have no other); the task is
    recorded with the head."""
    if "qa_outputs" in params:
        return {"name": "squad", "num_labels": 2, **Head("span", 2).record()}
    if "classifier" in params:
        n = int(np.shape(params["classifier"]["kernel"])[-1])
        head = Head("regression" if n == 1 else "classification", n, "pooler")
        return {"name": "classifier", "num_labels": n, **head.record()}
    return None


def load_tf1_dir(path: str | os.PathLike) -> tuple[BertConfig, dict[str, Any]]:
    """Reads `bert_config.json` and the checkpoint in a directory (or next to a checkpoint prefix).

    Returns (config, params)."""
    prefix = find_checkpoint(path)
    directory = os.fspath(path) if os.path.isdir(path) else os.path.dirname(prefix)
    config_path = os.path.join(directory, "bert_config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"no bert_config.json in {directory}")
    config = read_config_file(config_path)
    return config, params_from_tf1(read_variables(prefix), config)
