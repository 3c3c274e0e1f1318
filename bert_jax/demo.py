"""`make demo`: the whole BERT recipe, small, on the data shipped with the package.

1. create-data: the embedded public-domain corpus plus the bundled e-mails
   without their labels -> NSP pairs -> TFRecords (masks are drawn fresh each
   epoch by the input pipeline);
2. pretrain the `tiny` model (MLM + NSP) with the bundled WordPiece vocabulary;
3. fine-tune it on 300 labelled spam/ham e-mails, and the same architecture from
   random initialisation with the same recipe;
4. print both test accuracies and plot the curves to WORKDIR/demo.png.

Unlabelled in-domain text in the pretraining corpus and few labels for the
task are the setting where pretraining pays off, and a 10-minute CPU run shows it.

    python -m bert_jax.demo --workdir runs/demo [--pretrain_steps N] [--smoke]
"""

from __future__ import annotations

import argparse
import csv
import glob
import gzip
import json
import os
import re
import shutil
import time

from bert_jax import flags

SPAM_TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resources", "spam",
                          "train.tsv")
SEQ_LENGTH, PREDICTIONS, LABELLED_EXAMPLES = 64, 10, 300


def unlabelled_emails(path: str, sources: tuple[str, ...] = (SPAM_TRAIN,)) -> str:
    """The e-mails of `sources` (the spam TSVs; default the training split) without labels.

    In BERT's input format (a sentence per line, a blank line between e-mails)."""
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for source in sources:
            with open(source, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f, delimiter="\t"):
                    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", row["text"])]
                    out.write("\n".join(s for s in sentences if s) + "\n\n")
    return path


def create_data(out_dir: str, smoke: bool) -> list[str]:
    from bert_jax.data import corpus, data_stats
    from bert_jax.data import create_pretraining_data as cpd
    from bert_jax.data.options import DataOptions
    from bert_jax.host.folders import DATA_FOLDER
    from bert_jax.tokenization import DEFAULT_VOCAB
    outputs = cpd.shard_paths(out_dir, 8)
    if all(os.path.exists(p) for p in outputs):
        return outputs
    files = sorted(glob.glob(corpus.DEFAULT_CORPUS))[:1 if smoke else None]
    os.makedirs(out_dir, exist_ok=True)
    files.append(unlabelled_emails(os.path.join(out_dir, "emails.txt.gz")))
    options = DataOptions(max_seq_length=SEQ_LENGTH, max_predictions_per_seq=PREDICTIONS,
                          dupe_factor=1 if smoke else 2, dynamic_masking=True)
    stats = cpd.create_pretraining_data(files, outputs, DEFAULT_VOCAB, options,
                                        num_workers=os.cpu_count() or 1,
                                        summary_path=os.path.join(out_dir, DATA_FOLDER.summary))
    print("\n".join(data_stats.readable_summary(stats)))
    return outputs


def pretrain(workdir: str, data: list[str], steps: int, smoke: bool) -> dict:
    from bert_jax.pretrain.job import train_and_evaluate
    from bert_jax.train.config_loader import load_config
    config = load_config("pretrain.py:tiny", [
        f"--config.input_files={','.join(data)}",
        f"--config.num_train_steps={steps}",
        f"--config.max_seq_length={SEQ_LENGTH}",
        f"--config.max_predictions_per_seq={PREDICTIONS}",
        "--config.global_batch_size=64",
        "--config.learning_rate=2e-3",
        f"--config.warmup_steps={max(1, steps // 10)}",
        f"--config.log_every_steps={max(1, min(50, steps // 10))}",
        f"--config.eval_every_steps={steps if smoke else max(1, steps // 5)}",
        f"--config.checkpoint_every_steps={max(1, steps // 5)}",
        f"--config.eval_steps={2 if smoke else 20}",
    ])
    return train_and_evaluate(config, workdir)


def finetune_demo(workdir: str, init: str, smoke: bool) -> dict:
    from bert_jax.finetune.selection import run_finetune
    from bert_jax.train.config_loader import load_config
    overrides = [f"--config.init_from={init}", "--config.model=tiny", "--config.num_train_epochs=3",
                 f"--config.max_train_examples={64 if smoke else LABELLED_EXAMPLES}"]
    if smoke:
        overrides += ["--config.max_eval_examples=64", "--config.num_train_epochs=1"]
    return run_finetune(load_config("finetune.py:spam,tiny", overrides), workdir)


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plot(workdir: str, pretrain_dir: str, runs: dict[str, str]) -> str:
    """Pretraining MLM accuracy and loss, and fine-tuning validation accuracy per epoch."""
    import matplotlib

    from bert_jax.host.folders import TRAINING_WORKDIR
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (mlm, ft) = plt.subplots(1, 2, figsize=(11, 4))
    rows = read_jsonl(os.path.join(pretrain_dir, TRAINING_WORKDIR.metrics))
    for key, style in (("train/mlm_accuracy", "-"), ("eval/mlm_accuracy", "o-")):
        points = [(r["step"], r[key]) for r in rows if key in r]
        if points:
            mlm.plot(*zip(*points), style, label=key)
    mlm.set(title="tiny BERT pretraining", xlabel="step", ylabel="MLM accuracy")
    mlm.legend()
    for name, run_dir in runs.items():
        rows = read_jsonl(os.path.join(run_dir, TRAINING_WORKDIR.metrics))
        points = [(r["step"], v) for r in rows
                  for k, v in r.items() if k.startswith("validation/") and "accuracy" in k]
        if points:
            ft.plot(*zip(*points), "o-", label=name)
    ft.set(title="fine-tuning on spam/ham", xlabel="step", ylabel="validation accuracy")
    ft.legend()
    path = os.path.join(workdir, "demo.png")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def test_accuracy(results: dict) -> float:
    return results["test"]["accuracy"]


def main(argv: list[str] | None = None) -> int:
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="runs/demo")
    parser.add_argument("--pretrain_steps", type=int, default=700,
                        help="about 10 minutes on a 2-core CPU")
    parser.add_argument("--smoke", action="store_true",
                        help="a minute-long run of every stage (what CI executes)")
    parser.add_argument("--fresh", action="store_true", help="delete WORKDIR first")
    args = parser.parse_args(argv)
    if args.pretrain_steps < 1:
        parser.error(f"--pretrain_steps must be an integer >= 1, got {args.pretrain_steps}")
    from bert_jax.host import backend_env, compile_cache
    compile_cache.configure()  # before JAX is imported, as every bert-jax command does
    backend_env.configure_backends()
    from bert_jax.cli import quiet_libraries
    quiet_libraries()
    steps = 10 if args.smoke else args.pretrain_steps
    if args.fresh:
        shutil.rmtree(args.workdir, ignore_errors=True)
    start = time.time()
    pretrain_dir = os.path.join(args.workdir, "pretrain")
    print("== 1/4 create-data: embedded corpus -> NSP pairs -> TFRecords")
    data = create_data(os.path.join(args.workdir, "data"), args.smoke)
    print(f"== 2/4 pretrain tiny BERT for {steps} steps")
    pretrained = pretrain(pretrain_dir, data, steps, args.smoke)
    runs = {"pretrained": os.path.join(args.workdir, "finetune_pretrained"),
            "random init": os.path.join(args.workdir, "finetune_random")}
    print(f"== 3/4 fine-tune on {LABELLED_EXAMPLES} spam/ham e-mails from the pretrained "
          "checkpoint")
    from_pretrained = finetune_demo(runs["pretrained"], pretrain_dir, args.smoke)
    print("== 4/4 fine-tune the same architecture from random initialisation")
    from_scratch = finetune_demo(runs["random init"], "", args.smoke)
    png = plot(args.workdir, pretrain_dir, runs)
    eval_mlm = pretrained.get("eval", {}).get("mlm_accuracy")
    print(f"\npretraining: held-out MLM accuracy {eval_mlm:.3f} after {steps} steps")
    print(f"spam test accuracy: pretrained {test_accuracy(from_pretrained):.4f}, "
          f"random init {test_accuracy(from_scratch):.4f}")
    print(f"curves: {png}; total {(time.time() - start) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
