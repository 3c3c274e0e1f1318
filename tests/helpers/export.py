"""A small classifier and its vocabulary for the serving tests, and a SavedModel
reloaded in a fresh process."""

import json
import os
import subprocess
import sys
import textwrap

import flax.linen as nn
import jax
import numpy as np

from bert_jax.models.config import BertConfig

CONFIG = BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=40)

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat",
         "dog", "ran", "a", "##s", "big", "red", "hat", "and", "old", "man", "saw", "it",
         ".", ",", "!", "new", "day", "good", "bad", "film", "was", "very"]


LABELS = ["negative", "positive", "neutral"]


def random_params(module, seed=0):
    shapes = nn.unbox(jax.eval_shape(module.init, jax.random.key(0), np.zeros((1, 4), np.int32)))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: 0.1 * rng.standard_normal(s.shape, np.float32),
                        shapes["params"])


def reload_saved_model_texts(directory, texts, tmp_path):
    """serve_text on `texts` in a fresh process: {output name: numpy}."""
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = tmp_path / "texts.py"
    script.write_text(textwrap.dedent("""
        import json, sys, numpy as np, tensorflow as tf, tensorflow_text
        model = tf.saved_model.load(sys.argv[1] + "/saved_model")
        with open(sys.argv[3], encoding="utf-8") as f:
            texts = json.load(f)
        out = model.signatures["serve_text"](text=tf.constant(texts))
        np.savez(sys.argv[2], **{k: v.numpy().astype(bytes) if v.dtype == tf.string
                                 else v.numpy() for k, v in out.items()})
    """))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    subprocess.run([sys.executable, str(script), str(directory), str(tmp_path / "out.npz"),
                    str(tmp_path / "texts.json")], check=True, env=env, timeout=300)
    return dict(np.load(tmp_path / "out.npz"))
