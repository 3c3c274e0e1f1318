"""Directories that appear whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile

from bert_jax.errors import UserError
from bert_jax.host import folders, paths


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = False, *,
                     local: bool = False):
    """Yields a temporary sibling of `path` to fill.

    It replaces `path` only when the block succeeds, so a failed conversion or export leaves nothing
    behind. (In a bucket the final move copies the objects: a run killed during it may leave a
    partial copy. On local disk, a killed run's temporary sibling goes at the next run into `path`.)
    local=True: the yielded directory is on local disk even for a `path` in a bucket
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
    tmp = paths.owned_temporary_sibling(path)
    paths.remove_abandoned_siblings(path)
    try:  # made inside: a stop (SIGTERM) right after it must remove it too
        paths.makedirs(tmp)
        yield tmp
        paths.rmtree(path, missing_ok=True)
        paths.move(tmp, path)
    except OSError as e:  # named as the user's path, not the hidden temporary one
        paths.rmtree_after_writers(tmp)
        renamed = paths.in_user_terms(e, tmp, path)
        if renamed is e:
            raise
        raise renamed from e
    except BaseException as e:
        paths.rmtree_after_writers(tmp)
        if _full_disk(e):  # tensorstore's words (Orbax's writer) for a full disk
            raise UserError(f"no space left on the disk of {path} while writing it: free space "
                            "there or choose another folder") from e
        raise


def _full_disk(error: BaseException) -> bool:
    """Whether a library's non-OSError `error` says the disk is full."""
    text = str(error)
    return isinstance(error, Exception) and ("RESOURCE_EXHAUSTED" in text
                                             or "No space left on device" in text)
