"""Shared helpers for the fine-tuning tests (no tests here)."""

from __future__ import annotations

import contextlib
import os

import jax

from bert_jax.train.config_loader import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "finetune.py")
SHARED_DATA = os.path.join(ROOT, "..", "shared", "data")

# One layer, hidden 32: compiles in seconds; enough to exercise every code path.
MICRO_MODEL = ("{'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 32, "
               "'num_attention_heads': 2, 'intermediate_size': 64}")


def micro_config(task: str, *overrides: str):
    """configs/finetune.py:TASK,tiny with the micro model, short sequences, small batches."""
    return load_config(f"{CONFIG}:{task},tiny", [
        f"model={MICRO_MODEL}", "max_seq_length=32", "global_batch_size=8",
        "eval_batch_size=16", "log_every_steps=1000", *overrides])


@contextlib.contextmanager
def shared_compilation_cache(directory: str):
    """JAX's persistent compilation cache in `directory` with no size or compile-time
    threshold, inside the block: many tasks with the same shapes compile once (each
    fine-tuning run jits fresh step functions). Outside it the session's cache
    (conftest.py) keeps only compiles over a second."""
    from jax._src import compilation_cache  # reset_cache re-reads the settings
    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")
    old = {k: getattr(jax.config, k) for k in keys}
    for key, value in zip(keys, (directory, 0, 0)):
        jax.config.update(key, value)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        for key, value in old.items():
            jax.config.update(key, value)
        compilation_cache.reset_cache()


def fine_tune_briefly(model_dir, tmp_path, text=lambda i: f"the cat sat {'far ' * i}") -> dict:
    """A classifier fine-tuned from `model_dir` (init_from, its own architecture) for one
    epoch on 8 headerless label<TAB>text rows (row i's text: `text(i)`); returns the
    job's results."""
    from bert_jax.finetune import job

    train = tmp_path / "train.txt"
    train.write_text("".join(f"{'pos' if i % 2 else 'neg'}\t{text(i)}\n" for i in range(8)),
                     encoding="utf-8")
    config = micro_config("csv", f"init_from={model_dir}", "model=", f"train_file={train}",
                          f"validation_file={train}", "columns=label,text",
                          "max_train_examples=8", "num_train_epochs=1")
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        return job.finetune(config, str(tmp_path / "run"))
