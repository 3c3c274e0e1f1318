"""A sentence-transformers model's own way to make one vector of a text.

Its pooling (`modules.json` -> `1_Pooling/config.json`), whether it normalises
(a `Normalize` module) and its truncation (`sentence_bert_config.json`). `convert --from_hf` records
them in the model directory (SETTINGS_FILE); `bert-jax embed` then uses them unless told otherwise,
so the vectors are the model's sentence embeddings without flags. Its Dense layers (linear and
activation, `2_Dense/`) are converted too (DENSE_FILE). What `embed` cannot reproduce (a weighted-
mean or last-token pooling, an activation it has not, any other module) is recorded too, and
`embed` refuses to call its vectors the model's own: it asks for --pooling instead."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from bert_jax.errors import UserError
from bert_jax.host import paths

SETTINGS_FILE = "sentence_embedding.json"
# The Dense modules' weights beside it: [{"weight": [in, out], "bias": [out] or None}], each
# array as {"shape", "float32": base64 of its little-endian bytes}.
DENSE_FILE = "sentence_dense.json"
# sentence-transformers' pooling flags that `embed` has, as its --pooling names.
_POOLINGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
             "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len"}
# A Dense module's activation_function, as `apply_dense` names it.
ACTIVATIONS = {"torch.nn.modules.activation.Tanh": "tanh",
               "torch.nn.modules.linear.Identity": "identity",
               "torch.nn.modules.activation.ReLU": "relu",
               "torch.nn.modules.activation.Sigmoid": "sigmoid"}
_MODULE = "sentence_transformers.models."
# `bert-jax embed --pooling`'s choices (`serve.embed.POOLINGS`, which imports the model).
EMBED_POOLINGS = ("cls", "mean", "pooler", "max", "mean_sqrt_len")


def _read_json(path: str) -> Any:
    try:
        return json.loads(paths.read_text(path))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def read_hf_settings(hf_dir: str) -> tuple[dict[str, Any] | None, list[str]]:
    """(settings or None, notes) of an HF directory.

    None when it is no sentence-transformers model (no modules.json). Its pooling, Dense layers
    (`settings["dense"]`, their weights by `dense_file`) and Normalize are recorded; whatever
    `embed` cannot reproduce (another pooling, another module, a module out of place) is listed
    under "unreproduced", and a note says so: `embed` refuses such a model's own vectors
    (`own_settings`)."""
    modules_file = paths.join(hf_dir, "modules.json")
    if not paths.exists(modules_file):
        return None, []
    modules = _read_json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise UserError(f"{modules_file}: expected a list of modules")
    settings: dict[str, Any] = {"normalize": False}
    unreproduced = []
    for module in modules:
        kind = str(module.get("type", "")).removeprefix(_MODULE)
        folder = module.get("path") or "."
        if kind == "Transformer":
            continue
        if settings["normalize"] and kind != "Normalize":
            unreproduced.append(f"{kind or 'unknown'} module after Normalize ({folder})")
        elif kind == "Normalize":
            settings["normalize"] = True
        elif kind == "Pooling" and "pooling" not in settings:
            settings["pooling"] = _pooling(hf_dir, folder, unreproduced)
        elif kind == "Dense" and "pooling" in settings:
            dense = _dense(hf_dir, folder, unreproduced)
            if dense is not None:
                settings.setdefault("dense", []).append(dense)
        else:
            unreproduced.append(f"{kind or 'unknown'} module ({folder})")
    if "pooling" not in settings:
        unreproduced.append("missing Pooling module (modules.json names none)")
    if settings.get("pooling") is None:
        settings.pop("pooling", None)
    config_file = paths.join(hf_dir, "sentence_bert_config.json")
    if paths.exists(config_file):
        length = _read_json(config_file).get("max_seq_length")
        if isinstance(length, int) and not isinstance(length, bool) and length > 0:
            settings["max_seq_length"] = length
    if not unreproduced:
        return settings, []
    settings["unreproduced"] = unreproduced
    return settings, [f"embed does not reproduce its {', '.join(unreproduced)}: its sentence "
                      f"vectors are refused; --pooling {'|'.join(EMBED_POOLINGS)} embeds with "
                      "the encoder alone"]


def _pooling(hf_dir: str, folder: str, unreproduced: list[str]) -> str | None:
    """The --pooling name of the Pooling module in `folder`; None (and a note) if none."""
    pooling = _read_json(paths.join(hf_dir, folder, "config.json"))
    modes = [name for name, on in pooling.items()
             if name.startswith("pooling_mode_") and on is True]
    if len(modes) == 1 and modes[0] in _POOLINGS:
        return _POOLINGS[modes[0]]
    unreproduced.append(f"pooling {' + '.join(modes) or '(none)'} ({folder})")
    return None


def _dense(hf_dir: str, folder: str, unreproduced: list[str]) -> dict[str, Any] | None:
    """The Dense module in `folder`; None (and a note) for an activation `embed` has not.

    As {"path", "in_features", "out_features", "bias", "activation"}."""
    config_file = paths.join(hf_dir, folder, "config.json")
    config = _read_json(config_file)
    name = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    activation = ACTIVATIONS.get(name)
    sizes = [config.get(k) for k in ("in_features", "out_features")]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes):
        raise UserError(f"{config_file}: in_features and out_features must be integers >= 1, "
                        f"got {sizes}")
    if activation is None:
        unreproduced.append(f"Dense module's activation {name} ({folder})")
        return None
    return {"path": folder, "in_features": sizes[0], "out_features": sizes[1],
            "bias": config.get("bias", True) is not False, "activation": activation}


def dense_file(hf_dir: str, settings: dict[str, Any], hidden_size: int) -> str | None:
    """DENSE_FILE's text: the weights of `settings`' Dense modules, read from `hf_dir`.

    None when there are none. Each module's model.safetensors or pytorch_model.bin must hold
    linear.weight [out, in] (and linear.bias [out] with bias), as its config.json says, and take
    the width before it (the encoder's `hidden_size` first)."""
    from bert_jax.weights import hf

    layers, width = [], hidden_size
    for dense in settings.get("dense", []):
        directory = paths.join(hf_dir, dense["path"])
        n_in, n_out = dense["in_features"], dense["out_features"]
        if n_in != width:
            raise UserError(f"{directory}/config.json: in_features is {n_in} but the vectors "
                            f"before it have {width} numbers")
        width = n_out
        state = hf.read_state_dict(directory)
        want = {"linear.weight": (n_out, n_in), **({"linear.bias": (n_out,)}
                                                   if dense["bias"] else {})}
        for name, shape in want.items():
            if name not in state or tuple(state[name].shape) != shape:
                have = tuple(state[name].shape) if name in state else "missing"
                raise UserError(f"{directory}: {name} should be {list(shape)} as its "
                                f"config.json says, got {have}")
        layers.append({"weight": _encode(np.asarray(state["linear.weight"]).T),
                       "bias": _encode(state["linear.bias"]) if dense["bias"] else None})
    return json.dumps(layers) if layers else None


def _encode(array) -> dict[str, Any]:
    array = np.ascontiguousarray(array, dtype="<f4")
    return {"shape": list(array.shape), "float32": base64.b64encode(array.tobytes()).decode()}


def _decode(entry: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(entry["float32"]), "<f4").reshape(entry["shape"])


def dense_layers(directory: str) -> list[tuple[np.ndarray, np.ndarray | None, str]]:
    """(weight [in, out], bias [out] or None, activation) of each Dense module, in order.

    Read from a model directory's DENSE_FILE with the settings that name their activations."""
    settings = read(directory)
    if not settings.get("dense"):
        return []
    path = paths.join(directory, DENSE_FILE)
    weights = _read_json(path)
    if not isinstance(weights, list) or len(weights) != len(settings["dense"]):
        raise UserError(f"{path}: expected the weights of {len(settings['dense'])} Dense "
                        f"modules ({SETTINGS_FILE})")
    return [(_decode(w["weight"]), None if w["bias"] is None else _decode(w["bias"]),
             dense["activation"]) for w, dense in zip(weights, settings["dense"])]


def apply_dense(vectors: np.ndarray, layers) -> np.ndarray:
    """sentence-transformers' Dense modules on pooled float32 `vectors` [N, in].

    Each is linear, then its activation, layer after layer (`dense_layers`)."""
    for weight, bias, activation in layers:
        vectors = vectors @ weight + (0 if bias is None else bias)
        vectors = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0),
                   "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
                   "identity": lambda x: x}[activation](vectors).astype(np.float32)
    return vectors


def own_settings(directory: str, pooling: str | None) -> dict[str, Any]:
    """The sentence-embedding settings `embed` applies to the model in `directory`.

    With no `pooling` given (--pooling): the model's own (`read`), refused in one line when it has
    something `embed` cannot reproduce. With `pooling`, for such a model only its max_seq_length:
    the pooling asked for, without the model's normalisation."""
    settings = read(directory)
    unreproduced = settings.get("unreproduced")
    if pooling is not None and unreproduced:
        return {k: v for k, v in settings.items() if k == "max_seq_length"}
    if unreproduced:
        raise UserError(f"{directory} is a sentence-transformers model whose "
                        f"{', '.join(unreproduced)} bert_jax does not reproduce: embed cannot "
                        f"make its sentence vectors; --pooling {'|'.join(EMBED_POOLINGS)} "
                        "embeds with the encoder alone (not the model's own vectors)")
    return settings


def read(directory: str) -> dict[str, Any]:
    """The settings recorded in a model directory ({} when none)."""
    path = paths.join(directory, SETTINGS_FILE)
    return _read_json(path) if paths.exists(path) else {}
