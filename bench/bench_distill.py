"""Distillation on the spam set (docs/results.md): all-MiniLM-L6-v2 fine-tuned as the
teacher, a 2-layer student initialised from the teacher encoder's layers 0 and 3,
(a) distilled from the teacher and (b) fine-tuned directly with the same recipe.

  python bench/bench_distill.py [--workdir DIR] [--teacher FINETUNED_WORKDIR]
      [--train_examples 1000] [--epochs 3] [--learning_rate 1e-4] [--student_layers 2]
      [--tinybert] [--tinybert_student GENERALLY_DISTILLED_4x312]

Recipe for all three: a 1,000-e-mail training subset, max_seq_length 128, 3 epochs,
lr 1e-4, batch 32, mean pooling, length bucketing, the best dev epoch kept; the
distillation uses the defaults (T=2, alpha=0.5). Prints test accuracy of teacher, (a)
and (b) (each workdir's kept model, evaluated here), their inference examples/s over
the test set (after a warm-up pass), then one JSON line. A run whose
DIR/NAME/eval_results.json exists is reused (so an interrupted bench resumes); `--teacher`
takes any fine-tuned spam workdir as the teacher instead of fine-tuning one.
`--tinybert` adds (c): TinyBERT's 4-layer, 312-wide student (12 heads, intermediate
1200, randomly initialised: no general distillation) distilled from the 6-layer,
384-wide teacher with hidden-state matching through the learned 312 -> 384 projection
and attention matching (hidden_weight = attention_weight = 1), same recipe.
`--tinybert_student DIR` (implies --tinybert) adds (d): the same distillation from a
4x312 student that went through general distillation first (a model directory or
pretraining workdir, e.g. `bert-jax pretrain --config.teacher=all-MiniLM-L6-v2
--config.alpha=1 --config.hidden_weight=1 --config.attention_weight=1`,
docs/distillation.md), beside (c).
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

# TinyBERT's general student shape (Jiao et al. 2020): 4 layers, 312 wide, 12 heads.
TINYBERT = ("{'preset': 'tiny', 'num_hidden_layers': 4, 'hidden_size': 312, "
            "'num_attention_heads': 12, 'intermediate_size': 1200}")


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
    from bert_jax.finetune.distill import take_layers
    from bert_jax.tokenization import load_tokenizer
    from bert_jax.weights import pretrained
    if not os.path.exists(out):
        pre = pretrained.load(minilm)
        params, config, _ = take_layers(pre.params.get("bert", pre.params), pre.config, layers)
        pretrained.save(out, config, params, tokenizer=load_tokenizer(pre.tokenizer_dir))
    return out


def measure(workdir: str) -> dict:
    """Test accuracy of a fine-tuned workdir's kept model, and its inference examples/s
    over the test set (the second of two passes: the first compiles)."""
    from bert_jax.finetune import inference
    model = inference.load_finetuned(workdir)
    examples = model.task.load("test")
    features = model.task.featurize(examples, model.tokenizer, model.config.max_seq_length,
                                    training=False)
    model.outputs(features)
    start = time.time()
    outputs = model.outputs(features)
    seconds = time.time() - start
    return {"test_accuracy": model.task.evaluate(examples, features, outputs)["accuracy"],
            "inference_examples_per_second": round(len(features) / seconds, 1)}


def main():
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", help="where runs go (default: a temporary directory)")
    parser.add_argument("--teacher", help="a fine-tuned spam workdir to use as the teacher")
    parser.add_argument("--train_examples", type=int, default=1000)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--student_layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tinybert", action="store_true",
                        help="add the 4-layer, 312-wide TinyBERT student (c)")
    parser.add_argument("--tinybert_student", metavar="DIR",
                        help="add (d): a generally distilled 4x312 student (implies --tinybert)")
    args = parser.parse_args()
    data = os.path.join(DATA, "classification", "spam")
    if not os.path.isdir(data):
        skip(f"{data} is absent")
    work = args.workdir or tempfile.mkdtemp(prefix="bench_distill_")
    minilm = minilm_dir(work)

    from bert_jax.finetune import distill, job
    from bert_jax.train.config_loader import load_config
    teacher_dir = args.teacher or os.path.join(work, "teacher")
    if not args.teacher:
        once(teacher_dir, lambda w: job.finetune(
            load_config(f"{CONFIG}:csv", [f"init_from={minilm}", *recipe(args, data)]), w))
    student = student_dir(minilm, args.student_layers,
                          os.path.join(work, f"minilm_L{args.student_layers}"))
    direct = once(os.path.join(work, "direct"), lambda w: job.finetune(
        load_config(f"{CONFIG}:csv", [f"init_from={student}", *recipe(args, data)]), w))

    def run_distill(w):
        loaded = distill.load_finetuned_teacher(teacher_dir)
        distill.distill(distill.distill_config(loaded, student, recipe(args, data)), loaded, w)
    distilled = once(os.path.join(work, "distilled"), run_distill)
    runs = {"distilled": distilled, "direct": direct}
    def run_tinybert(student: str, model: list[str]):
        def run(w):
            loaded = distill.load_finetuned_teacher(teacher_dir)
            config = distill.distill_config(loaded, student, [
                *recipe(args, data), *model, "hidden_weight=1.0", "attention_weight=1.0"])
            distill.distill(config, loaded, w)
        return run
    if args.tinybert or args.tinybert_student:
        runs["tinybert_4L312"] = once(os.path.join(work, "tinybert_4L312"),
                                      run_tinybert("tiny", [f"model={TINYBERT}"]))
    if args.tinybert_student:  # the general student's own architecture and vocabulary
        runs["tinybert_general"] = once(os.path.join(work, "tinybert_general"),
                                        run_tinybert(args.tinybert_student, []))

    figures = {name: measure(path) for name, path in (
        ("teacher", teacher_dir), *((n, os.path.join(work, n)) for n in runs))}
    for name, results in runs.items():
        figures[name]["train_examples_per_second"] = results["train_examples_per_second"]
    speedup = round(figures["distilled"]["inference_examples_per_second"]
                    / figures["teacher"]["inference_examples_per_second"], 2)
    out = {"bench": "distill_spam", "teacher": teacher_dir, "train_examples": args.train_examples,
           "tinybert_student": args.tinybert_student,
           "epochs": args.epochs, "learning_rate": args.learning_rate,
           "student_layers": args.student_layers, **figures, "inference_speedup": speedup}
    for name in figures:
        print(f"{name:>14}: test accuracy {figures[name]['test_accuracy']:.4f}, inference "
              f"{figures[name]['inference_examples_per_second']} examples/s")
    print(f"the {args.student_layers}-layer student infers {speedup}x as fast as the teacher")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
