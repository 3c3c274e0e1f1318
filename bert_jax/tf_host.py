"""TensorFlow as a host-side library (tf.data, tfds, TFRecords, event files).

TensorFlow must never see an accelerator: by default it would reserve most of a
GPU's memory that JAX needs. Import it through `tensorflow()`.
"""

from __future__ import annotations

import functools


@functools.cache
def tensorflow():
    """The `tensorflow` module, with GPUs hidden from it."""
    import tensorflow as tf
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TF already created its devices (imported and used elsewhere)
        pass
    return tf
