"""BERT's recipe against the ModernBERT-class recipe and ELECTRA's replaced-token detection
at equal pretraining wall-clock, on the data shipped in the package (issues 46, 56).

1. each recipe, `configs/pretrain.py:tiny` (BERT: post-norm, learned positions, MLM 15% +
   NSP) and `:modernbert_tiny` (rotary, pre-norm, GeGLU, windows, MLM 30% on packed rows,
   warmup-stable-decay) and `:electra_small,tiny` (a tiny discriminator and its 1/4-wide
   generator, 15% masking, no NSP), at --seq_len and --batch rows, is timed over --probe_steps
   after its compile, then pretrained on the embedded corpus for the steps that fill
   --minutes of training at that pace (the same wall-clock for both; compiles excluded);
2. its final evaluation's MLM accuracy on the held-out rows (each recipe masks its own way:
   15% vs 30%, so the figures are not the same task; ELECTRA's is its generator's, and its
   discriminator's accuracy over every token is reported beside it);
3. each pretrained model fine-tuned on the bundled spam/ham e-mails with the demo's recipe
   (configs/finetune.py:spam,tiny from it) over --seeds: test accuracy mean and std.

    python bench/bench_recipes.py --workdir runs/recipes [--minutes 5] [--seeds 1,2,3]
        [--recipes bert,modern,electra]

The last line printed is one JSON object: {RECIPE: {"steps", "seconds_per_step",
"pretrain_minutes", "params", "mlm_accuracy", "test_accuracy": {"mean", "std"},
"seeds": {SEED: accuracy}}, "settings": {...}}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
CONFIGS = os.path.join(REPO, "configs")
RECIPES = {"bert": "tiny", "modern": "modernbert_tiny", "electra": "electra_small,tiny"}


def pretrain_config(recipe: str, args, steps: int, **extra):
    from bert_jax.train.config_loader import load_config

    overrides = {"max_seq_length": args.seq_len, "global_batch_size": args.batch,
                 "max_predictions_per_seq": max(1, int(0.3 * args.seq_len) + 1),
                 "num_train_steps": steps, "warmup_steps": max(1, steps // 10),
                 "log_every_steps": max(1, steps // 10), "eval_every_steps": steps,
                 "eval_steps": 10, "checkpoint_every_steps": steps, **extra}
    return load_config(f"{CONFIGS}/pretrain.py:{RECIPES[recipe]}",
                       [f"--config.{k}={v}" for k, v in overrides.items()])


def seconds_per_step(recipe: str, args) -> float:
    """The pace after compilation: the time between the probe run's first and last
    logged training steps (metrics.jsonl), per step."""
    from bert_jax.pretrain.job import train_and_evaluate

    workdir = os.path.join(args.workdir, f"{recipe}_probe")
    steps = args.probe_steps
    train_and_evaluate(pretrain_config(recipe, args, steps, log_every_steps=1,
                                       eval_steps=1), workdir)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        times = [(r["step"], r["time"]) for r in map(json.loads, f) if "train/loss" in r]
    (first, t0), (last, t1) = times[1], times[-1]  # step 1 includes the compile
    return (t1 - t0) / (last - first)


def pretrain(recipe: str, args) -> dict:
    from bert_jax.models.encoder import count_params
    from bert_jax.pretrain.job import train_and_evaluate
    from bert_jax.weights import pretrained

    pace = seconds_per_step(recipe, args)
    steps = max(2, int(args.minutes * 60 / pace))
    workdir = os.path.join(args.workdir, recipe)
    start = time.time()
    result = train_and_evaluate(pretrain_config(recipe, args, steps), workdir)
    return {"workdir": workdir, "steps": steps, "seconds_per_step": round(pace, 4),
            "pretrain_minutes": round((time.time() - start) / 60, 2),
            "params": count_params(pretrained.load(workdir).params["bert"]),
            "mlm_accuracy": round(result["eval"]["mlm_accuracy"], 4),
            **({"disc_accuracy": round(result["eval"]["disc_accuracy"], 4)}
               if "disc_accuracy" in result["eval"] else {})}


def finetune(recipe: str, init_from: str, args) -> dict:
    from bert_jax.finetune.cli import run_finetune
    from bert_jax.train.config_loader import load_config

    overrides = [f"--config.init_from={init_from}", "--config.model=",
                 f"--config.seeds={args.seeds}"]
    result = run_finetune(load_config(f"{CONFIGS}/finetune.py:spam,tiny", overrides),
                          os.path.join(args.workdir, f"{recipe}_spam"))
    return {"test_accuracy": {k: round(v, 4) for k, v in result["test"]["accuracy"].items()},
            "seeds": {str(seed): round(run["test"]["accuracy"], 4)
                      for seed, run in result["runs"].items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--minutes", type=float, default=5.0,
                        help="pretraining wall-clock per recipe, compiles excluded")
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--probe_steps", type=int, default=8)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--recipes", default=",".join(RECIPES),
                        help=f"comma-separated, of {', '.join(RECIPES)}")
    args = parser.parse_args(argv)
    if os.path.exists(args.workdir):
        parser.error(f"{args.workdir} exists: give a new --workdir")
    summary = {}
    for recipe in args.recipes.split(","):
        figures = pretrain(recipe, args)
        figures.update(finetune(recipe, figures.pop("workdir"), args))
        summary[recipe] = figures
        print(f"{recipe}: {json.dumps(figures)}", flush=True)
    summary["settings"] = {k: getattr(args, k) for k in
                           ("minutes", "seq_len", "batch", "probe_steps", "seeds",
                            "recipes")}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
