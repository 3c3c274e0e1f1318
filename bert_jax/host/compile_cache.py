"""bert_jax's cache directory, and the persistent JAX compilation cache in it.

The cache is on by default for every `bert-jax` command.

The cache root is `$BERT_JAX_CACHE_DIR`, else `$XDG_CACHE_HOME/bert_jax`, else
`~/.cache/bert_jax`; it holds `jax_compilation_cache/` and `data/` (the embedded corpus
converted once per machine). A second run of the same model and shapes loads its
compiled steps from disk instead of compiling again (tens of seconds for BERT-large on a
GPU). JAX's own `JAX_COMPILATION_CACHE_DIR`, when set, wins; `BERT_JAX_COMPILATION_CACHE=off`
(or 0, false, none, empty) turns the compilation cache off.

Set through the environment before JAX is imported, so this module imports no JAX.
"""

from __future__ import annotations

import os
from typing import Mapping, MutableMapping

OFF = ("", "0", "off", "false", "none")


def cache_root(environ: Mapping[str, str] = os.environ) -> str:
    """bert_jax's cache directory (see the module docstring)."""
    if environ.get("BERT_JAX_CACHE_DIR"):
        return environ["BERT_JAX_CACHE_DIR"]
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"),
                        "bert_jax")


def configure(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Points JAX's persistent cache at CACHE_ROOT/jax_compilation_cache unless told otherwise.

    Returns the directory in use, or None when the cache is off. Call before importing JAX."""
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return environ["JAX_COMPILATION_CACHE_DIR"]
    if environ.get("BERT_JAX_COMPILATION_CACHE", "on").strip().lower() in OFF:
        return None
    directory = os.path.join(cache_root(environ), "jax_compilation_cache")
    environ["JAX_COMPILATION_CACHE_DIR"] = directory
    return directory
