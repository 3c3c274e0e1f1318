"""TensorFlow as an optional host-side library (the tf.data pipeline, tfds, SavedModels).

A base install has none (`pip install 'bert_jax[tf]'` adds it): what needs it imports it through
`tensorflow(needed_for)`, which says so in one line where it is missing. TensorFlow must never see
an accelerator: by default it would reserve most of a GPU's memory that JAX needs.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys

from bert_jax.errors import UserError


class MissingTensorFlow(UserError):
    """A feature that needs TensorFlow on an install without it."""


def installed() -> bool:
    """Whether TensorFlow is installed (found, not imported)."""
    return "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is not None


def import_quietly() -> None:
    """Imports TensorFlow with file descriptor 2 closed.

    Its C++ start-up lines (oneDNN, 'could not find cuda drivers') are written before any log level
    applies. Commands call it first, and so do the processes they spawn. Without TensorFlow it does
    nothing."""
    if "tensorflow" in sys.modules or not installed():
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
def tensorflow(needed_for: str = "this command"):
    """The `tensorflow` module, with GPUs hidden from it.

    Raises MissingTensorFlow naming `needed_for` (what the user asked for) and the extra to install
    when TensorFlow is not installed."""
    if not installed():
        raise MissingTensorFlow(f"{needed_for} needs TensorFlow, which is not installed: "
                                "pip install 'bert_jax[tf]'")
    import tensorflow as tf
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TF already created its devices (imported and used elsewhere)
        pass
    return tf
