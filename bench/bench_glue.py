"""GLUE dev scores from `glue_data/` folders, bert_jax beside transformers' `run_glue`
recipe from the same weights, on this machine.

  python bench/bench_glue.py --glue_dir ../shared/data/glue --model hf:ORG/NAME|PATH \
      [--tasks mrpc,sst2] [--max_train_examples N] [--group_by_length] [--no_transformers]

The recipe on both sides is run_glue's: lr 2e-5, batch 32, 3 epochs, sequences of at
most 128 tokens (padded to 128 unless `--group_by_length`), the model at the end of the
schedule evaluated on dev. bert_jax keeps its own other defaults (AdamW weight decay
0.01, 10% warmup); transformers' side is run_glue's
(`AutoModelForSequenceClassification`, AdamW without weight decay or warmup, linear
decay). `--model` is a Hub name or any model path bert_jax takes; transformers reads the
same weights exported by `bert-jax convert --to_hf`. Both read the same examples
(`bert_jax.finetune.tasks.glue_files`) and are scored by the same metric functions. One JSON
line per task on stdout, then all of them as a Markdown table on stderr; a task whose
folder is absent is skipped with its reason.

`--group_by_length` is run_glue's `--group_by_length --pad_to_max_length False` on both
sides: batches drawn from length-sorted chunks of 50 batches, each padded only as far
as it needs (bert_jax: `length_bucketing`, to 16, 32, 64 or 128 tokens; transformers: to
the batch's longest). Masked padding changes no result, so this only saves the time
short sentences (SST-2's) spend on padding; the batches differ from random ones.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CONFIG = os.path.join(ROOT, "configs", "finetune.py")
RECIPE = {"learning_rate": 2e-5, "global_batch_size": 32, "num_train_epochs": 3.0,
          "max_seq_length": 128}


def bert_jax_run(task: str, args, workdir: str) -> dict:
    from bert_jax.finetune import job
    from bert_jax.train.config_loader import load_config
    overrides = [f"init_from={args.model}", f"glue_dir={args.glue_dir}",
                 "keep_checkpoint=last", f"max_train_examples={args.max_train_examples}",
                 f"seed={args.seed}", f"length_bucketing={args.group_by_length}",
                 *(f"{k}={v}" for k, v in RECIPE.items())]
    start = time.time()
    results = job.finetune(load_config(f"{CONFIG}:{task}", overrides), workdir)
    dev = {split: results[split] for split in results if split.startswith("validation")}
    return {"dev": dev, "wall_seconds": round(time.time() - start, 1),
            "train_examples_per_second": results["train_examples_per_second"]}


def _encode(tokenizer, examples):
    import torch
    pairs = examples[0]["text_b"] is not None
    batch = tokenizer([e["text_a"] for e in examples],
                      [e["text_b"] for e in examples] if pairs else None, truncation=True,
                      padding="max_length", max_length=RECIPE["max_seq_length"],
                      return_tensors="pt")
    labels = [e["label"] for e in examples]
    batch["labels"] = torch.tensor(labels, dtype=torch.float32 if isinstance(labels[0], float)
                                   else torch.long)
    return batch


def transformers_run(task, hf_dir: str, train, evals: dict, seed: int,
                     group_by_length: bool) -> dict:
    """run_glue's training loop in short: AdamW (no weight decay, no warmup), linear
    decay, gradient norm 1.0, one pass over shuffled batches per epoch (grouped by
    length as its Trainer's `group_by_length` does)."""
    import torch
    import transformers
    from transformers.trainer_pt_utils import get_length_grouped_indices

    from bert_jax.finetune.tasks import metrics

    torch.manual_seed(seed)
    num_labels = task.num_labels
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        hf_dir, num_labels=num_labels)
    encoded = _encode(tokenizer, train)
    lengths = encoded["attention_mask"].sum(1)
    batch_size = RECIPE["global_batch_size"]
    steps = int(RECIPE["num_train_epochs"]) * math.ceil(len(train) / batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=RECIPE["learning_rate"], weight_decay=0)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, 0, steps)
    generator = torch.Generator().manual_seed(seed)
    start = time.time()
    model.train()
    for _ in range(int(RECIPE["num_train_epochs"])):
        order = (torch.tensor(get_length_grouped_indices(lengths.tolist(), batch_size,
                                                         generator=generator))
                 if group_by_length else torch.randperm(len(train), generator=generator))
        for begin in range(0, len(order), batch_size):
            rows = order[begin:begin + batch_size]
            width = int(lengths[rows].max()) if group_by_length else None
            batch = {k: v[rows] if v.dim() == 1 else v[rows, :width] for k, v in encoded.items()}
            model(**batch).loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
    train_seconds = time.time() - start
    model.eval()
    dev = {}
    for split, examples in evals.items():
        outputs = []
        with torch.no_grad():
            for begin in range(0, len(examples), 64):
                batch = _encode(tokenizer, examples[begin:begin + 64])
                batch.pop("labels")
                logits = model(**batch).logits
                outputs.append(logits[:, 0] if num_labels == 1 else logits.argmax(-1))
        predictions = torch.cat(outputs).numpy()
        dev[split] = metrics.METRICS[task.metric](predictions, [e["label"] for e in examples])
    return {"dev": dev, "train_seconds": round(train_seconds, 1),
            "train_examples_per_second": round(len(train) * 3 / train_seconds, 2)}


def hf_weights(model: str, directory: str) -> str:
    """The model's weights as an HF directory transformers reads (bit-exact export)."""
    from bert_jax.weights import pretrained
    from bert_jax.weights.convert import to_hf
    out = os.path.join(directory, "hf")
    to_hf(pretrained.local_path(model), out)
    return out


def bench_task(name: str, args, directory: str) -> dict:
    from bert_jax.finetune import tasks
    from bert_jax.finetune.tasks import glue_files
    from bert_jax.train.config_loader import load_config

    try:
        task = tasks.get_task(load_config(f"{CONFIG}:{name}", [f"glue_dir={args.glue_dir}"]))
        glue_files.task_folder(args.glue_dir, name)
    except ValueError as e:
        return {"task": name, "skipped": str(e)}
    out = {"task": name, "model": args.model, "recipe": RECIPE, "seed": args.seed,
           "group_by_length": args.group_by_length,
           "bert_jax": bert_jax_run(name, args, os.path.join(directory, name))}
    if not args.no_transformers:
        from bert_jax.finetune.task_data import subsample  # bert_jax's subset, the same rows
        train = subsample(task.load("train"), args.max_train_examples, args.seed)
        evals = {split: task.load(split) for split in task.eval_splits}
        out["transformers_run_glue"] = transformers_run(task, hf_weights(args.model, directory),
                                                        train, evals, args.seed,
                                                        args.group_by_length)
    return out


def _scores(dev: dict) -> str:
    """Each split's metrics in GLUE's percent form; the split named when there are several."""
    return "; ".join((f"{split}: " if len(dev) > 1 else "")
                     + ", ".join(f"{metric} {100 * value:.1f}" for metric, value in scores.items())
                     for split, scores in dev.items())


def table(rows: list[dict]) -> str:
    """The JSON lines as one Markdown table, bert_jax beside run_glue's recipe."""
    lines = ["| task | bert_jax dev | transformers run_glue dev | "
             "training examples/s (bert_jax / transformers) |", "|---|---|---|---|"]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['task']} | skipped: {row['skipped']} | | |")
            continue
        ours, theirs = row["bert_jax"], row.get("transformers_run_glue")
        lines.append(f"| {row['task']} | {_scores(ours['dev'])} | "
                     f"{_scores(theirs['dev']) if theirs else 'not run'} | "
                     f"{ours['train_examples_per_second']} / "
                     f"{theirs['train_examples_per_second'] if theirs else '-'} |")
    return "\n".join(lines)


def main():
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--glue_dir", required=True, help="glue_data, or a task's folder")
    parser.add_argument("--model", required=True, help="hf:ORG/NAME or a model path")
    parser.add_argument("--tasks", default="mrpc", help="comma-separated GLUE task names")
    parser.add_argument("--max_train_examples", type=int, default=0,
                        help="a random subset of the training set (0 = all)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--group_by_length", action="store_true",
                        help="length-grouped batches padded only as far as they need")
    parser.add_argument("--no_transformers", action="store_true",
                        help="bert_jax only (no PyTorch reference)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_glue_") as directory:
        for name in args.tasks.split(","):
            rows.append(bench_task(name.strip(), args, directory))
            print(json.dumps(rows[-1]), flush=True)
    print(table(rows), file=sys.stderr)


if __name__ == "__main__":
    main()
