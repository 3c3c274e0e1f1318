"""Directories that appear whole or not at all."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = False):
    """Yields a temporary sibling of `path` to fill; it replaces `path` only when the
    block succeeds, so a failed conversion or export leaves nothing behind."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite (overwrite=True) to replace it")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    try:
        yield tmp
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
