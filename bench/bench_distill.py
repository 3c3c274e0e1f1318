"""Distillation on the spam set (docs/distillation.md): all-MiniLM-L6-v2 fine-tuned as the
teacher, a 2-layer student initialised from the teacher encoder's layers 0 and 3,
(a) distilled from the teacher and (b) fine-tuned directly with the same recipe.

  python bench/bench_distill.py [--workdir DIR] [--teacher FINETUNED_WORKDIR]
      [--train-examples 1000] [--epochs 3] [--learning-rate 1e-4] [--student-layers 2]

Recipe for all three: a 1,000-e-mail training subset, max_seq_length 128, 3 epochs,
lr 1e-4, batch 32, mean pooling, length bucketing, the best dev epoch kept; the
distillation uses the defaults (T=2, alpha=0.5). Prints test accuracy of teacher, (a)
and (b), and inference examples/s of teacher and student over the test set (after a
warm-up pass), then one JSON line. A run whose DIR/NAME/eval_results.json exists is
reused (so an interrupted bench resumes); `--teacher` reuses a fine-tuned workdir.
Exits 0 with a "skipped" reason when the data or the MiniLM package is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_finetune import CONFIG, DATA, minilm_dir, skip  # noqa: E402


def recipe(args, data: str) -> list[str]:
    return [f"train_file={data}/train.tsv", f"validation_file={data}/dev.tsv",
            f"test_file={data}/test.tsv", f"max_train_examples={args.train_examples}",
            "max_seq_length=128", f"num_train_epochs={args.epochs}",
            f"learning_rate={args.learning_rate}", "global_batch_size=32", "pooling=mean",
            "length_bucketing=true", "log_every_steps=1000", f"seed={args.seed}"]


def once(workdir: str, run) -> dict:
    """`run(workdir)`'s results, or those a finished earlier run left there."""
    path = os.path.join(workdir, "eval_results.json")
    if not os.path.exists(path):
        start = time.time()
        run(workdir)
        print(f"{workdir}: {time.time() - start:.0f} s", file=sys.stderr)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def student_dir(minilm: str, layers: int, out: str) -> str:
    """The teacher encoder's evenly spaced layers as a model directory."""
    from bert_jax import pretrained
    from bert_jax.finetune.distill import take_layers
    from bert_jax.tokenization import load_tokenizer
    if not os.path.exists(out):
        pre = pretrained.load(minilm)
        params, config, _ = take_layers(pre.params.get("bert", pre.params), pre.config, layers)
        pretrained.save(out, config, params, tokenizer=load_tokenizer(pre.tokenizer_dir))
    return out


def examples_per_second(workdir: str, data: str) -> float:
    from bert_jax.finetune import inference
    model = inference.load_finetuned(workdir)
    examples = model.task.load("test")
    features = model.task.featurize(examples, model.tokenizer, model.config.max_seq_length,
                                    training=False)
    model.outputs(features)  # compiles every bucket's shape
    start = time.time()
    model.outputs(features)
    return len(features) / (time.time() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", help="where runs go (default: a temporary directory)")
    parser.add_argument("--teacher", help="a fine-tuned spam workdir to use as the teacher")
    parser.add_argument("--train-examples", type=int, default=1000)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--student-layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    data = os.path.join(DATA, "classification", "spam")
    if not os.path.isdir(data):
        skip(f"{data} is absent")
    work = args.workdir or tempfile.mkdtemp(prefix="bench_distill_")
    minilm = minilm_dir(work)

    from bert_jax.config_loader import load_config
    from bert_jax.finetune import distill, trainer
    teacher_dir = args.teacher or os.path.join(work, "teacher")
    teacher = once(teacher_dir, lambda w: trainer.finetune(
        load_config(f"{CONFIG}:csv", [f"init={minilm}", *recipe(args, data)]), w))
    student = student_dir(minilm, args.student_layers,
                          os.path.join(work, f"minilm_L{args.student_layers}"))
    direct = once(os.path.join(work, "direct"), lambda w: trainer.finetune(
        load_config(f"{CONFIG}:csv", [f"init={student}", *recipe(args, data)]), w))

    def run_distill(w):
        loaded = distill.load_teacher(teacher_dir)
        distill.distill(distill.distill_config(loaded, student, recipe(args, data)), loaded, w)
    distilled = once(os.path.join(work, "distilled"), run_distill)

    speed = {"teacher": examples_per_second(teacher_dir, data),
             "student": examples_per_second(os.path.join(work, "distilled"), data)}
    out = {"bench": "distill_spam", "train_examples": args.train_examples,
           "epochs": args.epochs, "learning_rate": args.learning_rate,
           "teacher_learning_rate": teacher["learning_rate"],
           "student_layers": args.student_layers,
           "test_accuracy": {"teacher": teacher["test"]["accuracy"],
                             "distilled": distilled["test"]["accuracy"],
                             "direct": direct["test"]["accuracy"]},
           "dev_accuracy": {"teacher": teacher["validation"]["accuracy"],
                            "distilled": distilled["validation"]["accuracy"],
                            "direct": direct["validation"]["accuracy"]},
           "train_examples_per_second": {
               "teacher": teacher["train_examples_per_second"],
               "distilled": distilled["train_examples_per_second"],
               "direct": direct["train_examples_per_second"]},
           "inference_examples_per_second": {k: round(v, 1) for k, v in speed.items()},
           "inference_speedup": round(speed["student"] / speed["teacher"], 2)}
    for name in ("teacher", "distilled", "direct"):
        print(f"{name:>9}: test accuracy {out['test_accuracy'][name]:.4f}, "
              f"dev {out['dev_accuracy'][name]:.4f}")
    print(f"inference on the test set: teacher {speed['teacher']:.1f} examples/s, "
          f"{args.student_layers}-layer student {speed['student']:.1f} examples/s "
          f"({out['inference_speedup']}x)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
