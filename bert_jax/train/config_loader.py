"""Config files as plain Python: `path/to/file.py[:VARIANT]` plus `KEY=VALUE` overrides.

A config file defines `get_config(variant)` (or `get_config()`) returning an
`ml_collections.ConfigDict`. The file is imported as a module (never exec'd as
a string). Overrides use dotted keys into the ConfigDict, values are Python
literals (`3`, `1e-4`, `'adamw'`, `(('embed', 'fsdp'),)`, `{'data': -1}`),
`true`/`false`, or bare strings:

    load_config("configs/pretrain.py:tiny", ["num_train_steps=100", "mesh_shape.fsdp=2"])

A bare file name that is not a path to an existing file (`pretrain.py:tiny`,
`finetune.py:sst2`) names a config shipped with the package: `configs/` is installed as
`bert_jax.configs` (setup.py maps it), and in a source checkout it is the repository's
`configs/` beside the package. Loading a config imports no jax.

Why not `ml_collections.config_flags`: it binds configs to absl's global FLAGS and parses
the whole of `sys.argv`, while our commands are argparse subcommands (`bert-jax pretrain
...`) that load configs from Python too (`load_config` in tests, the demo, notebooks).
This loader keeps its file format (`get_config(variant)`) and its `--config.KEY=VALUE`
overrides without global state.

`build_config` is the one constructor of a run config: a config file's (`load_config`),
the one saved with a fine-tuned model (`finetune.inference.saved_config`) and a
distillation's pass through it. It reads old configs in today's terms (the schema's
RENAMED_KEYS, with a warning where the user wrote the old name, and ADDED_KEYS), fills
the keys a config lacks, applies the overrides and runs the schema check once.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import inspect
import os
import sys
import traceback
from typing import Any, Mapping, Sequence

import ml_collections

from bert_jax import RESOURCES
from bert_jax.errors import UserError
from bert_jax.train import run_config


def packaged_config_dir() -> str:
    """The directory of the configs that ship with bert_jax.

    In a source checkout the repository's `configs/` beside this package (first: an editable install
    of another checkout maps `bert_jax.configs` there), else the installed `bert_jax.configs`."""
    checkout = os.path.join(os.path.dirname(os.path.dirname(RESOURCES)), "configs")
    if all(os.path.isfile(os.path.join(checkout, n)) for n in ("pretrain.py", "finetune.py")):
        return checkout
    spec = importlib.util.find_spec("bert_jax.configs")
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return checkout


def resolve_config_path(path: str) -> str:
    """`path` if it is a file; else, for a bare file name, the packaged config of that name.

    Raises FileNotFoundError naming both places it looked."""
    if os.path.isfile(path):
        return path
    packaged = os.path.join(packaged_config_dir(), path)
    if os.path.basename(path) == path and os.path.isfile(packaged):
        return packaged
    directory = packaged_config_dir()
    shipped = sorted(n for n in os.listdir(directory) if n.endswith(".py")
                     and not n.startswith("_")) if os.path.isdir(directory) else []
    raise FileNotFoundError(f"config file not found: {path} (the packaged configs, usable by "
                            f"bare name: {', '.join(shipped) or 'none found'})")


def _import_file(path: str):
    path = resolve_config_path(path)
    name = "_bert_jax_config_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise UserError(f"{e.filename or path}:{e.lineno}: {e.msg} (config file syntax)") \
            from None
    except Exception as e:  # noqa: BLE001 - the file's own code failed: name its line
        raise _file_error(path, e, "running the config file") from None
    if not hasattr(module, "get_config"):
        raise UserError(f"{path} has no get_config() function")
    return module


def _file_error(path: str, e: Exception, doing: str) -> UserError:
    """`e`, raised by a config file's code, as one line naming the file's line."""
    line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__))
                 if os.path.abspath(f.filename) == os.path.abspath(path)), "?")
    return UserError(f"{path}:{line}: {type(e).__name__}: {e} ({doing})")


def parse_value(text: str) -> Any:
    """A command-line value: a Python literal, true/false/none, or else the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _to_config_value(value: Any) -> Any:
    return ml_collections.ConfigDict(value) if isinstance(value, dict) else value


def apply_override(config: ml_collections.ConfigDict, key: str, value: Any) -> None:
    """Sets a dotted `key` (which must exist) to `value`.

    It converts ints to floats and lists to tuples where the field has that type, and allows a str
    <-> dict switch (e.g. `model` as a preset name or a dict of fields)."""
    *parents, leaf = key.split(".")
    node = config
    for i, part in enumerate(parents):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            raise UserError(f"unknown config key {'.'.join(parents[:i + 1])!r} (in {key!r})")
        node = node[part]
    if not isinstance(node, ml_collections.ConfigDict) or leaf not in node:
        keys = sorted(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
        near = difflib.get_close_matches(leaf, keys, n=3, cutoff=0.6)
        hint = (f"; did you mean {' or '.join(near)}?" if near else
                f"; known here: {', '.join(keys)}" if keys else "")
        raise UserError(f"unknown config key {key!r}{hint}")
    old = node[leaf]
    if isinstance(old, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(old, tuple) and isinstance(value, list):
        value = tuple(value)
    if isinstance(old, str) and not isinstance(value, (str, dict)) and value is not None:
        value = str(value)  # e.g. --config.model=tiny is fine, and so is a numeric-looking name
    try:
        node[leaf] = _to_config_value(value)
    except TypeError:
        # "auto": a number the run derives from its data (fine-tuning's max_seq_length).
        if not (isinstance(value, dict) or isinstance(old, (dict, ml_collections.ConfigDict))
                or old is None or (value == "auto" and isinstance(old, int))):
            raise UserError(f"config key {key!r} expects {type(old).__name__} (like {old!r}), "
                            f"got {type(value).__name__} {value!r}") from None
        with node.ignore_type():
            node[leaf] = _to_config_value(value)


# command -> (its packaged config file, a key only that family of configs has)
FAMILIES = {"pretrain": ("pretrain.py", "input_files"), "finetune": ("finetune.py", "task")}


def check_family(config: ml_collections.ConfigDict, path: str, command: str) -> None:
    """Refuses the config of another command (e.g. finetune.py for `bert-jax pretrain`).

    Such a config would otherwise fail later on a missing key, as a bug."""
    file, key = FAMILIES[command]
    if key in config:
        return
    other = family_of(config)
    raise UserError(f"{path} is not a {command} config (it has no '{key}' key"
                    + (f"; it is a config for `bert-jax {other}`" if other else "")
                    + f"): `bert-jax {command}` takes configs/{file}[:VARIANT] or a copy of it")


def read_config(spec: str) -> ml_collections.ConfigDict:
    """What `FILE.py` or `FILE.py:VARIANT`'s get_config returns, as written.

    Nothing renamed, filled or checked (`load_config` builds a run config from it; a recipe's values
    fill a saved config)."""
    path, _, variant = spec.partition(":")
    module = _import_file(path)
    takes_arg = bool(inspect.signature(module.get_config).parameters)
    if variant and not takes_arg:
        raise UserError(f"{path}: get_config() takes no variant, got {variant!r}")
    try:
        return module.get_config(variant or None) if takes_arg else module.get_config()
    except Exception as e:  # noqa: BLE001 - e.g. a value of the wrong type for its key
        raise _file_error(module.__file__, e, "in get_config") from None


def load_config(spec: str, overrides: Sequence[str] = (),
                command: str | None = None) -> ml_collections.ConfigDict:
    """The run config of `FILE.py` or `FILE.py:VARIANT` with `KEY=VALUE` overrides applied.

    The overrides are applied in order (`build_config`).

    Overrides may carry a leading `--config.` (as typed on a command line). `command`
    ("pretrain", "finetune"): the config must be of that command's family; without it
    the family is the config's own.
    """
    path = spec.partition(":")[0]
    config = read_config(spec)
    if command:
        check_family(config, path, command)
    family = command or family_of(config)
    if family is None:
        raise UserError(f"{path} is not a run config: it has neither "
                        + " nor ".join(f"'{key}' (configs/{file})"
                                       for file, key in FAMILIES.values()))
    return build_config(family, config, overrides, source=path)


def build_config(command: str, values: ml_collections.ConfigDict | Mapping[str, Any],
                 overrides: Sequence[str] = (), *, source: str = "", saved: bool = False,
                 defaults: ml_collections.ConfigDict | None = None,
                 changes: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
    """The run config of `command` ("pretrain", "finetune") from `values`.

    `values`: a ConfigDict, used in place, or a mapping. Every config a job runs comes from here. In
    order: old key names renamed (RENAMED_KEYS; with a warning naming `source`, unless `saved`); for
    a `saved` config (one saved with a fine-tuned model), the keys added since at the values its run
    had (ADDED_KEYS), the keys dropped since dropped, and JSON's lists back to tuples where the key
    holds tuples; the keys it still lacks from `defaults` (a recipe's config; else the schema's);
    `changes` set; `overrides` applied (`apply_overrides`); then the schema check, once
    (`run_config.seal`), which marks the result as built for the jobs to trust."""
    schema = run_config.SCHEMAS[command]
    config = values if isinstance(values, ml_collections.ConfigDict) else \
        ml_collections.ConfigDict(dict(values))
    warn = _warn_once()
    rename_keys(config, None if saved else
                (lambda message: warn(f"{source}: {message}" if source else message)))
    if saved:
        _read_as_today(config, schema)
    run_config.fill_defaults(config, schema, defaults)
    with config.ignore_type():
        for key, value in (changes or {}).items():
            config[key] = _to_config_value(value)
    apply_overrides(config, overrides, warn)
    return run_config.seal(config, command)


def _read_as_today(config: ml_collections.ConfigDict, schema: list) -> None:
    """A saved config's keys as today's schema has them.

    The keys added since at the values its run had, the keys dropped since dropped
    (they mean nothing now), lists (JSON's tuples) as tuples where the key holds tuples."""
    known = {key.name: key for key in schema}
    with config.ignore_type():
        for name, value in run_config.ADDED_KEYS.items():
            if name in known and name not in config:
                config[name] = value
        for name in [name for name in config.keys() if name not in known]:
            del config[name]
        for key in schema:
            if isinstance(key.default, tuple) and isinstance(config.get(key.name), list):
                value = _tuples(config[key.name])
                del config[key.name]  # else the field, typed list, keeps a list
                config[key.name] = value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def family_of(config: ml_collections.ConfigDict) -> str | None:
    """The command a config is for ("pretrain", "finetune"), by the key only it has."""
    return next((c for c, (_, k) in FAMILIES.items() if k in config), None)


def apply_overrides(config: ml_collections.ConfigDict, overrides: Sequence[str],
                    warn=None) -> None:
    """Applies `KEY=VALUE` overrides (optionally with a leading `--config.`) in order.

    An old key name (`run_config.RENAMED_KEYS`) or a list in a `run_config.SWEEP_KEYS` key sets its
    new key and warns."""
    warn = warn or _warn_once()
    for item in overrides:
        key, sep, text = item.removeprefix("--").removeprefix("config.").partition("=")
        if not sep:
            raise UserError(f"override {item!r} is not KEY=VALUE")
        value = parse_value(text)
        new = _new_key(config, key, value)
        if new != key:
            warn(f"--config.{key} is deprecated, use --config.{new}")
        apply_override(config, new, value)


def _new_key(config: ml_collections.ConfigDict, key: str, value: Any) -> str:
    """The key an override of `key` sets: itself, its new name, or `sweep.KEY` for a list."""
    renamed = run_config.RENAMED_KEYS
    if key not in config and key in renamed and _has(config, renamed[key]):
        return renamed[key]
    swept = f"sweep.{key}"
    is_list = isinstance(value, (list, tuple)) or (isinstance(value, str) and "," in value)
    if key in run_config.SWEEP_KEYS and is_list and _has(config, swept):
        return swept
    return key


def _has(config: ml_collections.ConfigDict, key: str) -> bool:
    node = config
    for part in key.split("."):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            return False
        node = node[part]
    return True


def rename_keys(config: ml_collections.ConfigDict, warn=None) -> ml_collections.ConfigDict:
    """Moves each old key of `run_config.RENAMED_KEYS` that `config` holds to its new name.

    Such a config is a saved or hand-written one from before the rename; `warn(message)` is told of
    each."""
    for old, new in run_config.RENAMED_KEYS.items():
        if old not in config:
            continue
        if warn:
            warn(f"config key {old!r} is deprecated, use {new!r}")
        value = config[old]
        del config[old]
        *parents, leaf = new.split(".")
        node = config
        for part in parents:
            if part not in node:
                node[part] = ml_collections.ConfigDict()
            node = node[part]
        with node.ignore_type():
            node[leaf] = value
    return config


def _warn_once():
    """A `warn(message)` that prints each message once, as one line on stderr."""
    said = set()

    def warn(message: str) -> None:
        if message not in said:
            said.add(message)
            print(f"bert-jax: warning: {message}", file=sys.stderr)
    return warn
