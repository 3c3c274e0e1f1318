"""The persistent JAX compilation cache, on by default for every `bert-jax` command.

A second run of the same model and shapes loads its compiled steps from disk
instead of compiling again (tens of seconds for BERT-large on a GPU). The
directory is, in order of precedence:

  JAX_COMPILATION_CACHE_DIR   JAX's own setting, left as it is when set
  BERT_JAX_CACHE_DIR          ours; set it empty (or to 0 / off) to turn the cache off
  $XDG_CACHE_HOME/bert_jax/jax_compilation_cache  (default ~/.cache/...)

Set through the environment before JAX is imported, so this module imports no JAX.
"""

from __future__ import annotations

import os
from typing import MutableMapping

OFF = ("", "0", "off", "false", "none")


def configure(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Points JAX's persistent cache at our directory unless told otherwise; returns the
    directory in use, or None when the cache is off. Call before importing JAX."""
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return environ["JAX_COMPILATION_CACHE_DIR"]
    directory = environ.get("BERT_JAX_CACHE_DIR")
    if directory is None:
        home = environ.get("HOME") or os.path.expanduser("~")
        base = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
        directory = os.path.join(base, "bert_jax", "jax_compilation_cache")
    elif directory.strip().lower() in OFF:
        return None
    environ["JAX_COMPILATION_CACHE_DIR"] = directory
    return directory
