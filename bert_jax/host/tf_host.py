"""TensorFlow as a host-side library (tf.data, tfds, TFRecords, event files).

TensorFlow must never see an accelerator: by default it would reserve most of a
GPU's memory that JAX needs. Import it through `tensorflow()`.
"""

from __future__ import annotations

import functools
import os
import sys


def import_quietly() -> None:
    """Imports TensorFlow with file descriptor 2 closed.

    Its C++ start-up lines (oneDNN, 'could not find cuda drivers') are written before any log level
    applies. Commands call it first, and so do the processes they spawn."""
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@functools.cache
def tensorflow():
    """The `tensorflow` module, with GPUs hidden from it."""
    import tensorflow as tf
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TF already created its devices (imported and used elsewhere)
        pass
    return tf
