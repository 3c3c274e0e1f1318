"""Fine-tuning helpers: the micro model's configs, a compilation cache shared by runs of
the same shapes, small task files and a brief fine-tune."""

from __future__ import annotations

import contextlib
import os

import jax

from bert_jax.train.config_loader import load_config

from helpers import REPO

CONFIG = os.path.join(REPO, "configs", "finetune.py")
SHARED_DATA = os.path.join(REPO, "..", "shared", "data")
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


POSITIVE = ["a wonderful film", "great acting and a great story", "i loved it",
            "superb , moving and funny", "the best film this year"]


NEGATIVE = ["a dull mess", "boring and far too long", "i hated it",
            "awful acting , awful story", "the worst film this year"]


def write_tsv(path, rows, header=("sentence", "sentiment")):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(map(str, row)) + "\n")
    return str(path)


SENTENCES = [
    ("John Smith lives in Paris .", "B-PER I-PER O O B-LOC O"),
    ("Acme Corporation hired Mary yesterday .", "B-ORG I-ORG O B-PER O O"),
    ("Berlin and Rome are capitals .", "B-LOC O B-LOC O O O"),
    ("Unbelievably , Zoë won .", "O O B-PER O O"),
]


def write_conll(path, sentences, repeat=1):
    with open(path, "w", encoding="utf-8") as f:
        f.write("-DOCSTART- -X- O O\n\n")
        for _ in range(repeat):
            for words, tags in sentences:
                for w, t in zip(words.split(), tags.split()):
                    f.write(f"{w} NNP B-NP {t}\n")
                f.write("\n")
    return str(path)


EXPECTED = {
    "cola": ("validation", {"matthews_corrcoef"}, ["CoLA.tsv"]),
    "sst2": ("validation", {"accuracy"}, ["SST-2.tsv"]),
    "mrpc": ("validation", {"f1", "accuracy"}, ["MRPC.tsv"]),
    "qqp": ("validation", {"f1", "accuracy"}, ["QQP.tsv"]),
    "stsb": ("validation", {"pearson", "spearman"}, ["STS-B.tsv"]),
    "mnli": ("validation_matched", {"accuracy"}, ["MNLI-m.tsv", "MNLI-mm.tsv"]),
    "qnli": ("validation", {"accuracy"}, ["QNLI.tsv"]),
    "rte": ("validation", {"accuracy"}, ["RTE.tsv"]),
    "wnli": ("validation", {"accuracy"}, ["WNLI.tsv"]),
    "ax": ("validation_matched", {"accuracy"}, ["AX.tsv"]),
}


