"""A sentence-transformers model's own way to make one vector of a text.

Its pooling (`modules.json` -> `1_Pooling/config.json`), whether it normalises
(a `Normalize` module) and its truncation (`sentence_bert_config.json`). `convert --from_hf` records
them in the model directory (SETTINGS_FILE); `bert-jax embed` then uses them unless told otherwise,
so the vectors are the model's sentence embeddings without flags."""

from __future__ import annotations

import json
from typing import Any

from bert_jax.errors import UserError
from bert_jax.host import paths

SETTINGS_FILE = "sentence_embedding.json"
# sentence-transformers' pooling flags that `embed` has, as its --pooling names.
_POOLINGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
_MODULE = "sentence_transformers.models."


def _read_json(path: str) -> Any:
    try:
        return json.loads(paths.read_text(path))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def read_hf_settings(hf_dir: str) -> tuple[dict[str, Any] | None, list[str]]:
    """(settings or None, notes) of an HF directory.

    None when it is no sentence-transformers model (no modules.json) or its pooling is not one
    `embed` has (a note says which); a note for each module that is not converted (Dense, ...)."""
    modules_file = paths.join(hf_dir, "modules.json")
    if not paths.exists(modules_file):
        return None, []
    modules = _read_json(modules_file)
    if not isinstance(modules, list):
        raise UserError(f"{modules_file}: expected a list of modules")
    settings: dict[str, Any] = {"normalize": False}
    notes = []
    for module in modules:
        kind = str(module.get("type", "")).removeprefix(_MODULE)
        if kind == "Transformer":
            continue
        if kind == "Normalize":
            settings["normalize"] = True
        elif kind == "Pooling":
            pooling = _read_json(paths.join(hf_dir, module.get("path", ""), "config.json"))
            modes = [name for name, on in pooling.items()
                     if name.startswith("pooling_mode_") and on is True]
            if len(modes) != 1 or modes[0] not in _POOLINGS:
                return None, [f"its pooling ({', '.join(modes) or 'none'}) is not one "
                              f"`embed` has ({', '.join(_POOLINGS.values())}): embed takes "
                              "--pooling"]
            settings["pooling"] = _POOLINGS[modes[0]]
        else:
            notes.append(f"its {kind or 'unknown'} module ({module.get('path')}) is not "
                         "converted: embed's vectors stop before it")
    if "pooling" not in settings:
        return None, ["modules.json names no Pooling module: embed takes --pooling"]
    config_file = paths.join(hf_dir, "sentence_bert_config.json")
    if paths.exists(config_file):
        length = _read_json(config_file).get("max_seq_length")
        if isinstance(length, int) and not isinstance(length, bool) and length > 0:
            settings["max_seq_length"] = length
    return settings, notes


def read(directory: str) -> dict[str, Any]:
    """The settings recorded in a model directory ({} when none)."""
    path = paths.join(directory, SETTINGS_FILE)
    return _read_json(path) if paths.exists(path) else {}
