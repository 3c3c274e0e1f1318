"""Directories that appear whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile

from bert_jax.host import folders, paths


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = False, *,
                     local: bool = False):
    """Yields a temporary sibling of `path` to fill.

    It replaces `path` only when the block succeeds, so a failed conversion or export leaves nothing
    behind. (In a bucket the final move copies the objects: a run killed during it may leave a
    partial copy.) local=True: the yielded directory is on local disk even for a `path` in a bucket
    (for writers that only know local files, e.g. TensorFlow's SavedModel); its files are uploaded
    when the block succeeds."""
    path = paths.abspath(path)
    if overwrite:  # never replace a training run's workdir (local or in a bucket)
        folders.check_kind(path, folders.MODEL)
    if paths.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite (overwrite=True) to replace it")
    if local and paths.is_remote(path):
        staging = tempfile.mkdtemp(prefix="bert-jax-upload-")
        try:
            yield staging
            with atomic_directory(path, overwrite=True) as tmp:
                paths.upload_tree(staging, tmp)
        finally:
            paths.rmtree(staging, missing_ok=True)
        return
    tmp = paths.temporary_sibling(path)
    try:  # made inside: a stop (SIGTERM) right after it must remove it too
        paths.makedirs(tmp)
        yield tmp
        paths.rmtree(path, missing_ok=True)
        paths.move(tmp, path)
    except OSError as e:  # named as the user's path, not the hidden temporary one
        paths.rmtree(tmp, missing_ok=True)
        renamed = paths.in_user_terms(e, tmp, path)
        if renamed is e:
            raise
        raise renamed from e
    except BaseException:
        paths.rmtree(tmp, missing_ok=True)
        raise
