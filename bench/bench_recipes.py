"""BERT's recipe against the ModernBERT-class recipe and ELECTRA's replaced-token detection
at an equal pretraining budget of CPU time, then the same fine-tune of each on two
classification sets (issues 46, 56).

1. each recipe, `configs/pretrain.py:tiny` (BERT: post-norm, learned positions, MLM 15% +
   NSP) and `:modernbert_tiny` (rotary, pre-norm, GeGLU, windows, MLM 30% on packed rows,
   warmup-stable-decay) and `:electra_small,tiny` (a tiny discriminator and its 1/4-wide
   generator, 15% masking, no NSP), at --seq_len and --batch rows, is timed over --probe_steps
   after its compile, then pretrained on the embedded corpus for the steps that fill
   --minutes of CPU time at that pace. The budget is the bench process's CPU time
   (time.process_time: every thread, so on 2 idle cores about twice the wall-clock), not
   wall-clock, which other work on a shared machine stretches; compiles are excluded. Each
   recipe's steps, its probe's CPU seconds per step, and the CPU minutes its training
   steps really took (from its metrics.jsonl rows) are printed;
2. its final evaluation's MLM accuracy on the held-out rows (each recipe masks its own way:
   15% vs 30%, so the figures are not the same task; ELECTRA's is its generator's, and its
   discriminator's accuracy over every token is reported beside it, with the accuracy of
   always answering "original" for comparison);
3. each pretrained model fine-tuned with the demo's recipe (configs/finetune.py, `,tiny`:
   lr 1e-3, batch 16, 64 tokens, one epoch) over --seeds on (a) the bundled spam/ham
   e-mails and (b) SST-2 from --shared (DIR/glue/SST-2/{train,dev}.tsv): --sst2_train
   examples drawn per seed from its train set less 500 held out for validation, tested on
   its dev set (872 sentences). Without that folder SST-2 is skipped, saying why. Test
   accuracy mean and std over seeds.

    nice -n 19 python bench/bench_recipes.py --workdir runs/recipes [--minutes 5]
        [--seeds 1,2,3] [--recipes bert,modern,electra] [--shared ../shared/data]

A table closes the output, then one JSON line: {RECIPE: {"steps", "cpu_seconds_per_step",
"train_cpu_minutes", "wall_minutes", "params", "mlm_accuracy", ["disc_accuracy",
"disc_majority",] TASK: {"test_accuracy": {"mean", "std"}, "seeds": {SEED: accuracy}}},
"settings": {...}}.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
CONFIGS = os.path.join(REPO, "configs")
RECIPES = {"bert": "tiny", "modern": "modernbert_tiny", "electra": "electra_small,tiny"}
SST2_VALIDATION = 500  # SST-2 train rows held out for validation (its dev set is the test)


class CpuClock:
    """Samples (wall time, process CPU time) on a thread while training runs, so that the
    CPU seconds between two wall times logged in metrics.jsonl can be read afterwards."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.samples = interval, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        self.samples.append((time.time(), time.process_time()))

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()

    def cpu_at(self, wall: float) -> float:
        """Process CPU seconds at `wall`, interpolated between the samples around it."""
        after = next((i for i, (w, _) in enumerate(self.samples) if w >= wall),
                     len(self.samples) - 1)
        (w0, c0), (w1, c1) = self.samples[max(0, after - 1)], self.samples[after]
        return c0 if w1 <= w0 else c0 + (c1 - c0) * (min(max(wall, w0), w1) - w0) / (w1 - w0)


def train_rows(workdir: str) -> list[tuple[int, float]]:
    """(step, wall time) of each logged training step."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [(r["step"], r["time"]) for r in map(json.loads, f) if "train/loss" in r]


def cpu_per_step(rows: list[tuple[int, float]], clock: CpuClock) -> float:
    """CPU seconds per step between the first and the last of `rows`."""
    (first, t0), (last, t1) = rows[0], rows[-1]
    return (clock.cpu_at(t1) - clock.cpu_at(t0)) / (last - first)


def pretrain_config(recipe: str, args, steps: int, **extra):
    from bert_jax.train.config_loader import load_config

    overrides = {"max_seq_length": args.seq_len, "global_batch_size": args.batch,
                 "max_predictions_per_seq": max(1, int(0.3 * args.seq_len) + 1),
                 "num_train_steps": steps, "warmup_steps": max(1, steps // 10),
                 "log_every_steps": max(1, steps // 10), "eval_every_steps": steps,
                 "eval_steps": 10, "checkpoint_every_steps": steps, **extra}
    return load_config(f"{CONFIGS}/pretrain.py:{RECIPES[recipe]}",
                       [f"--config.{k}={v}" for k, v in overrides.items()])


def probe_cpu_per_step(recipe: str, args) -> float:
    """The CPU pace after compilation: CPU seconds between the probe run's second and
    last logged training steps (the first includes the compile), per step."""
    from bert_jax.pretrain.job import train_and_evaluate

    workdir = os.path.join(args.workdir, f"{recipe}_probe")
    with CpuClock() as clock:
        train_and_evaluate(pretrain_config(recipe, args, args.probe_steps, log_every_steps=1,
                                           eval_steps=1), workdir)
    return cpu_per_step(train_rows(workdir)[1:], clock)


def pretrain(recipe: str, args) -> dict:
    from bert_jax.models.encoder import count_params
    from bert_jax.pretrain.job import train_and_evaluate
    from bert_jax.weights import pretrained

    pace = probe_cpu_per_step(recipe, args)
    steps = max(2, int(args.minutes * 60 / pace))
    workdir = os.path.join(args.workdir, recipe)
    start = time.time()
    with CpuClock() as clock:
        result = train_and_evaluate(pretrain_config(recipe, args, steps), workdir)
    rows = train_rows(workdir)
    spent = cpu_per_step(rows, clock) if len(rows) > 1 else pace  # first row: the compile
    evaluation = result["eval"]
    figures = {"workdir": workdir, "steps": steps, "cpu_seconds_per_step": round(pace, 4),
               "train_cpu_minutes": round(spent * steps / 60, 2),
               "wall_minutes": round((time.time() - start) / 60, 2),
               "params": count_params(pretrained.load(workdir).params["bert"]),
               "mlm_accuracy": round(evaluation["mlm_accuracy"], 4)}
    if "disc_accuracy" in evaluation:  # ELECTRA: beside always answering "original"
        figures["disc_accuracy"] = round(evaluation["disc_accuracy"], 4)
        figures["disc_majority"] = round(1 - evaluation["replaced"], 4)
    return figures


def sst2_overrides(args) -> list[str] | None:
    """The csv task's overrides for SST-2: train and validation files written to the
    workdir from its train set (SST2_VALIDATION rows held out, drawn with seed 0), its dev
    set as the test; None when --shared has no SST-2."""
    source = os.path.join(args.shared, "glue", "SST-2")
    train, dev = (os.path.join(source, f"{s}.tsv") for s in ("train", "dev"))
    if not (os.path.isfile(train) and os.path.isfile(dev)):
        return None
    with open(train, encoding="utf-8") as f:
        header, *rows = f.readlines()
    random.Random(0).shuffle(rows)
    target = os.path.join(args.workdir, "sst2_data")
    os.makedirs(target, exist_ok=True)
    for name, part in (("validation", rows[:SST2_VALIDATION]),
                       ("train", rows[SST2_VALIDATION:])):
        with open(os.path.join(target, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.writelines([header, *part])
    return [f"--config.train_file={target}/train.tsv",
            f"--config.validation_file={target}/validation.tsv",
            f"--config.test_file={dev}", "--config.text_column=sentence",
            f"--config.max_train_examples={args.sst2_train}"]


def finetune(recipe: str, init_from: str, args, task: str, variant: str,
             overrides: list[str]) -> dict:
    from bert_jax.finetune.selection import run_finetune
    from bert_jax.train.config_loader import load_config

    overrides = [f"--config.init_from={init_from}", "--config.model=",
                 f"--config.seeds={args.seeds}", *overrides]
    result = run_finetune(load_config(f"{CONFIGS}/finetune.py:{variant}", overrides),
                          os.path.join(args.workdir, f"{recipe}_{task}"))
    return {"test_accuracy": {k: round(v, 4) for k, v in result["test"]["accuracy"].items()},
            "seeds": {str(seed): round(run["test"]["accuracy"], 4)
                      for seed, run in result["runs"].items()}}


def table(summary: dict, tasks: list[str]) -> str:
    """One row per recipe: its budget, pretraining accuracies and test accuracies."""
    def accuracy(figures, task):
        test = figures[task]["test_accuracy"]
        return f"{test['mean']:.3f} ± {test['std']:.3f}"

    lines = ["recipe   steps  CPU s/step  train CPU min  wall min  MLM acc  disc acc "
             "(majority)  " + "  ".join(f"{t} test acc" for t in tasks)]
    for recipe, f in summary.items():
        disc = (f"{f['disc_accuracy']:.3f} ({f['disc_majority']:.3f})"
                if "disc_accuracy" in f else "-")
        lines.append(f"{recipe:8} {f['steps']:5}  {f['cpu_seconds_per_step']:10.3f}  "
                     f"{f['train_cpu_minutes']:13.2f}  {f['wall_minutes']:8.2f}  "
                     f"{f['mlm_accuracy']:7.3f}  {disc:19}  "
                     + "  ".join(f"{accuracy(f, t):>{len(t) + 9}}" for t in tasks))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--minutes", type=float, default=5.0,
                        help="pretraining CPU time per recipe (process CPU, all threads), "
                             "compiles excluded")
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--probe_steps", type=int, default=20)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--recipes", default=",".join(RECIPES),
                        help=f"comma-separated, of {', '.join(RECIPES)}")
    parser.add_argument("--shared", default=os.path.join(REPO, "..", "shared", "data"),
                        help="folder holding glue/SST-2/{train,dev}.tsv (SST-2 skipped "
                             "without it)")
    parser.add_argument("--sst2_train", type=int, default=8000,
                        help="SST-2 training examples per seed (with 2,000 every recipe "
                             "stayed at the majority class)")
    args = parser.parse_args(argv)
    if os.path.exists(args.workdir):
        parser.error(f"{args.workdir} exists: give a new --workdir")
    os.makedirs(args.workdir)
    tasks = {"spam": ("spam,tiny", [])}
    sst2 = sst2_overrides(args)
    if sst2 is None:
        print(f"SST-2 skipped: no glue/SST-2/train.tsv and dev.tsv under {args.shared} "
              "(--shared)", flush=True)
    else:
        tasks["sst2"] = ("csv,tiny", sst2)
    summary = {}
    for recipe in args.recipes.split(","):
        figures = pretrain(recipe, args)
        init_from = figures.pop("workdir")
        for task, (variant, overrides) in tasks.items():
            figures[task] = finetune(recipe, init_from, args, task, variant, overrides)
        summary[recipe] = figures
        print(f"{recipe}: {json.dumps(figures)}", flush=True)
    print(table(summary, list(tasks)), flush=True)
    summary["settings"] = {k: getattr(args, k) for k in
                           ("minutes", "seq_len", "batch", "probe_steps", "seeds",
                            "recipes", "shared", "sst2_train")}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
