"""The full text of a library error that a message reduces to what failed and where.

A corrupt checkpoint's TensorStore report runs to hundreds of lines. It goes to the file the CLI
keeps for library errors (`cli._LibraryTracebacks`, which calls `set_file`), or, without the CLI, to
the `bert_jax` logger at INFO (shown by `--verbose`)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

log = logging.getLogger(__name__)

_write: Callable[[str], str] | None = None  # writes text to the CLI's file, returns its path


def set_file(write: Callable[[str], str] | None) -> None:
    """Where full texts go from now on.

    `write(text)` appends to a file and returns its path; None: to the logger."""
    global _write
    _write = write


def keep(error: BaseException, what: str) -> str:
    """Files the full text of `error` under the heading `what`.

    Returns the words to add to the short message: "; full text in PATH", or "" where no file is
    kept."""
    text = f"{what}\n" + "".join(traceback.format_exception(error))
    if _write is None:
        log.info("%s", text)
        return ""
    return f"; full text in {_write(text)}"
