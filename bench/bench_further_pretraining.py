"""Does further pretraining on the task's own unlabelled text pay? Measured on the data
shipped in the package: the embedded public-domain corpus (King James Bible, State of the
Union addresses) is the general text, the bundled spam/ham e-mails are the domain.

1. create-data (MLM + NSP rows of 64 tokens): the general corpus; the 1,500 training
   e-mails without labels (the domain text); the dev and test e-mails without labels,
   used only to score the domain MLM accuracy of each model (never trained on);
2. `general`: the `tiny` model pretrained on the general corpus alone, --general_steps;
3. `general+domain`: pretraining continued from (2) on the unlabelled training e-mails
   for --further_steps (`--config.init_from=` the workdir of 2, a fresh schedule);
4. `general+general`: continued from (2) on the general corpus for the same
   --further_steps: equal pretraining compute to (3), so (3) against (4) isolates the
   text, and (4) against (2) shows what the extra steps alone buy;
5. each of the three fine-tuned on --labelled spam/ham e-mails with the demo's recipe
   (configs/finetune.py:spam,tiny, --epochs epochs), --seeds seeds (`--config.seeds`:
   each seed draws its own labelled subset, the same one in every arm): test accuracy
   mean and std (np.std) over the seeds.

Every model's MLM accuracy is scored on the held-out e-mails and on the general corpus's
held-out rows (the same masks for every model): the domain shift, and what (3) forgets.

    python bench/bench_further_pretraining.py --workdir runs/further [--fresh]

The defaults are the run docs/finetuning.md reports (about 30 minutes on 2 shared cores).

Stages whose outputs exist with the same settings are reused; a stage whose settings
changed is rerun with everything after it. The last line printed is one JSON object:
{"test_accuracy": {ARM: {"mean", "std"}}, "paired": {"ARM - ARM": {"mean", "std", "wins",
"seeds"}}, "mlm_accuracy": {ARM: {"emails", "general"}}, "minutes": {STAGE: minutes},
"total_minutes"}; WORKDIR/results.json adds every seed's test accuracy and the settings.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
CONFIGS = os.path.join(REPO, "configs")
SPAM = os.path.join(REPO, "bert_jax", "resources", "spam")
SEQ_LENGTH, PREDICTIONS = 64, 10  # the demo's rows: as long as the fine-tuning inputs
ARMS = ("general", "general+domain", "general+general")
STAGE_FILE = "bench_stage.json"


def cached(directory: str, settings: dict, run) -> dict:
    """run() -> figures, or the figures saved in `directory` by a finished earlier run
    with the same settings. A finished stage with other settings is deleted first; an
    unfinished one is left for run() to resume (pretraining and fine-tuning do)."""
    done = os.path.join(directory, STAGE_FILE)
    settings = json.loads(json.dumps(settings))  # compared as read back from JSON
    if os.path.exists(done):
        with open(done) as f:
            saved = json.load(f)
        if saved["settings"] == settings:
            return saved["figures"]
        shutil.rmtree(directory)
    start = time.time()
    figures = {**run(), "minutes": round((time.time() - start) / 60, 2)}
    os.makedirs(directory, exist_ok=True)
    with open(done, "w") as f:
        json.dump({"settings": settings, "figures": figures}, f)
    return figures


def create_data(out: str, sources: list[str], dupe_factor: int) -> dict:
    """TFRecords of MLM + NSP rows from text files (or spam TSVs, read without labels):
    {"records": their paths, "rows", "minutes"}."""
    from bert_jax.data import create_pretraining_data as cpd
    from bert_jax.data.options import DataOptions
    from bert_jax.demo import unlabelled_emails
    from bert_jax.tokenization import DEFAULT_VOCAB

    def run():
        os.makedirs(out, exist_ok=True)
        tsvs = tuple(s for s in sources if s.endswith(".tsv"))
        files = [s for s in sources if not s.endswith(".tsv")]
        if tsvs:
            files.append(unlabelled_emails(os.path.join(out, "emails.txt.gz"), tsvs))
        options = DataOptions(max_seq_length=SEQ_LENGTH, max_predictions_per_seq=PREDICTIONS,
                              dupe_factor=dupe_factor, dynamic_masking=True)
        stats = cpd.create_pretraining_data(files, records, DEFAULT_VOCAB, options,
                                            num_workers=2, progress=False)
        return {"rows": stats.instances}
    records = cpd.shard_paths(out, 8)  # not saved: a copied workdir reads its own
    return {"records": records, **cached(out, {"sources": sources,
                                               "dupe_factor": dupe_factor}, run)}


def pretrain_config(records: list[str], args, *, steps: int = 1, learning_rate: float = 0.0,
                    init_from: str = "", eval_fraction: float | None = None):
    """configs/pretrain.py:tiny with the bench's rows, batch and schedule (warmup 10%,
    then linear decay; one evaluation and one checkpoint, at the end)."""
    from bert_jax.train.config_loader import load_config
    return load_config(f"{CONFIGS}/pretrain.py:tiny", [
        f"--config.model={args.model}",
        f"--config.input_files={','.join(records)}",
        f"--config.init_from={init_from}",
        f"--config.num_train_steps={steps}",
        f"--config.max_seq_length={SEQ_LENGTH}",
        f"--config.max_predictions_per_seq={PREDICTIONS}",
        f"--config.global_batch_size={args.pretrain_batch}",
        f"--config.learning_rate={learning_rate}",
        f"--config.allow_zero_learning_rate={learning_rate == 0}",  # evaluation only
        f"--config.warmup_steps={max(1, steps // 10)}",
        f"--config.log_every_steps={max(1, min(50, steps // 10))}",
        f"--config.eval_every_steps={steps}",
        f"--config.checkpoint_every_steps={steps}",
        f"--config.eval_steps={args.eval_steps}",
        f"--config.eval_fraction={args.eval_fraction if eval_fraction is None else eval_fraction}",
    ])


def pretrain(workdir: str, records: list[str], steps: int, learning_rate: float,
             init_from: str, settings: dict, args) -> dict:
    """A pretraining run (from `init_from`'s weights when set): its own held-out MLM
    accuracy. `settings` names what the run depends on (upstream stages included)."""
    from bert_jax.pretrain.job import train_and_evaluate

    def run():
        config = pretrain_config(records, args, steps=steps, learning_rate=learning_rate,
                                 init_from=init_from)
        result = train_and_evaluate(config, workdir)
        return {"own_eval_mlm_accuracy": result.get("eval", {}).get("mlm_accuracy")}
    return cached(workdir, settings, run)


def mlm_accuracy(model_dir: str, records: list[str], eval_fraction: float, args) -> float:
    """The masked-token accuracy of `model_dir` on the held-out rows of `records` (all of
    them at eval_fraction 1), with the pipeline's evaluation masks (seed 0: the same for
    every model)."""
    import jax

    from bert_jax.pretrain import inputs
    from bert_jax.pretrain.setup import Setup
    from bert_jax.pretrain.steps import evaluate
    from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
    from bert_jax.weights import pretrained
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    # The model and steps of a training config; the rows of one that holds out
    # `eval_fraction` (1.0, all of them, is no training run's).
    run_setup = Setup.build(pretrain_config(records, args), tokenizer.vocab_size)
    config = pretrain_config(records, args, eval_fraction=eval_fraction)
    state_plan = run_setup.state_plan
    params = pretrained.init_params(state_plan.abstract.params, pretrained.load(model_dir).params,
                                    state_plan.shardings.params, source=model_dir)
    _, eval_fn = run_setup.jit_steps()
    batches = inputs.make_iterator(config, records, tokenizer, split="eval", process_index=0,
                                   process_count=1)
    try:
        with jax.set_mesh(run_setup.partitioner.mesh):
            metrics = evaluate(eval_fn, params, batches, run_setup.partitioner, args.eval_steps)
    finally:
        batches.close()
    if not metrics:
        raise ValueError(f"no held-out rows in {os.path.dirname(records[0])}: raise "
                         "--eval_fraction")
    return round(metrics["mlm_accuracy"], 4)


def finetune(workdir: str, init_from: str, settings: dict, args) -> dict:
    """The demo's spam recipe from `init_from`, one run per seed (`--config.seeds`)."""
    from bert_jax.finetune.cli import run_finetune
    from bert_jax.train.config_loader import load_config

    def run():
        overrides = [f"--config.init_from={init_from}", "--config.model=",
                     f"--config.seeds={args.seeds}",
                     f"--config.num_train_epochs={args.epochs}",
                     f"--config.max_train_examples={args.labelled}",
                     *args.finetune_override]
        result = run_finetune(load_config(f"{CONFIGS}/finetune.py:spam,tiny", overrides),
                              workdir)
        return {"test_accuracy": {k: round(v, 4) for k, v in result["test"]["accuracy"].items()},
                "seeds": {str(seed): round(run["test"]["accuracy"], 4)
                          for seed, run in result["runs"].items()}}
    return cached(workdir, settings, run)


def paired(a: dict, b: dict) -> dict:
    """Test accuracy differences a - b seed by seed (a seed draws the same labelled
    subset in every arm): mean, std (np.std) and how many seeds a wins outright."""
    diffs = [a[seed] - b[seed] for seed in a]
    return {"mean": round(float(np.mean(diffs)), 4), "std": round(float(np.std(diffs)), 4),
            "wins": sum(d > 0 for d in diffs), "seeds": len(diffs)}


def main(argv=None) -> int:
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="runs/further_pretraining")
    parser.add_argument("--model", default="tiny", help="model preset")
    parser.add_argument("--general_steps", type=int, default=1000)
    parser.add_argument("--general_lr", type=float, default=2e-3)
    parser.add_argument("--further_steps", type=int, default=600,
                        help="continued pretraining steps, on the e-mails and on the corpus")
    parser.add_argument("--further_lr", type=float, default=5e-4,
                        help="peak learning rate of the continued runs (a fresh warmup and "
                             "linear decay)")
    parser.add_argument("--pretrain_batch", type=int, default=64)
    parser.add_argument("--dupe_factor", type=int, default=2)
    parser.add_argument("--eval_steps", type=int, default=20,
                        help="MLM evaluation batches (of --pretrain_batch rows), at most")
    parser.add_argument("--eval_fraction", type=float, default=0.01,
                        help="share of the pretraining rows held out (never trained on) for "
                             "the MLM accuracy")
    parser.add_argument("--labelled", type=int, default=300,
                        help="labelled training e-mails, a seed-dependent subset")
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--seeds", default="1,2,3,4,5,6,7,8,9,10")
    parser.add_argument("--finetune_override", action="append", default=[],
                        metavar="--config.KEY=VALUE", help="more fine-tuning settings")
    parser.add_argument("--corpus", help="glob of general text files (default: the "
                        "embedded public-domain corpus)")
    parser.add_argument("--fresh", action="store_true", help="delete WORKDIR first")
    args = parser.parse_args(argv)
    from bert_jax.host import backend_env, compile_cache
    compile_cache.configure()  # before JAX is imported, as every bert-jax command does
    backend_env.configure_backends()
    from bert_jax.cli import quiet_libraries
    from bert_jax.data import corpus
    quiet_libraries()
    if args.fresh:
        shutil.rmtree(args.workdir, ignore_errors=True)
    general_files = sorted(glob.glob(args.corpus or corpus.DEFAULT_CORPUS))
    if not general_files:
        print(f"error: --corpus {args.corpus}: no files", file=sys.stderr)
        return 2
    work = lambda *names: os.path.join(args.workdir, *names)
    minutes = {}

    print("== 1/5 create-data: general corpus, training e-mails, held-out e-mails", flush=True)
    data = {name: create_data(work("data", name), sources, dupe)
            for name, sources, dupe in (
                ("general", general_files, args.dupe_factor),
                ("emails", [os.path.join(SPAM, "train.tsv")], args.dupe_factor),
                ("heldout_emails", [os.path.join(SPAM, f"{s}.tsv") for s in ("dev", "test")], 1))}
    minutes["create_data"] = round(sum(d["minutes"] for d in data.values()), 2)
    print(json.dumps({name: d["rows"] for name, d in data.items()}), flush=True)

    common = {k: getattr(args, k) for k in ("model", "pretrain_batch", "dupe_factor",
                                              "eval_fraction")}
    general = {**common, "steps": args.general_steps, "lr": args.general_lr}
    print(f"== 2/5 pretrain {args.model} on the general corpus, {args.general_steps} steps",
          flush=True)
    models = {"general": work("pretrain_general")}
    stages = {"general": pretrain(models["general"], data["general"]["records"],
                                  args.general_steps, args.general_lr, "", general, args)}
    for arm, text, step, name in (("general+domain", "emails", "3/5", "the e-mails"),
                                  ("general+general", "general", "4/5", "the general corpus")):
        print(f"== {step} continue pretraining on {name}, {args.further_steps} steps",
              flush=True)
        models[arm] = work(f"pretrain_{arm.replace('+', '_')}")
        stages[arm] = pretrain(models[arm], data[text]["records"], args.further_steps,
                               args.further_lr, models["general"],
                               {"from": general, "text": text, "steps": args.further_steps,
                                "lr": args.further_lr}, args)
    for arm in ARMS:
        minutes[f"pretrain {arm}"] = stages[arm]["minutes"]
    minutes["mlm_accuracy"] = 0.0

    print("== 5/5 MLM accuracy of each model, then fine-tuning on "
          f"{args.labelled} labelled e-mails, seeds {args.seeds}", flush=True)
    mlm, finetuned = {}, {}
    for arm in ARMS:
        mlm[arm] = cached(work(f"mlm_{arm.replace('+', '_')}"), stages[arm], lambda: {
            "emails": mlm_accuracy(models[arm], data["heldout_emails"]["records"], 1.0, args),
            "general": mlm_accuracy(models[arm], data["general"]["records"],
                                    args.eval_fraction, args)})
        print(f"{arm}: held-out MLM accuracy {json.dumps(mlm[arm])}", flush=True)
        minutes["mlm_accuracy"] = round(minutes["mlm_accuracy"] + mlm[arm]["minutes"], 2)
        finetuned[arm] = finetune(
            work(f"finetune_{arm.replace('+', '_')}"), models[arm],
            {"pretraining": stages[arm], **{k: getattr(args, k) for k in (
                "labelled", "epochs", "seeds", "finetune_override")}}, args)
        minutes[f"finetune {arm}"] = finetuned[arm]["minutes"]
        print(f"{arm}: test accuracy {json.dumps(finetuned[arm])}", flush=True)

    summary = {"test_accuracy": {arm: finetuned[arm]["test_accuracy"] for arm in ARMS},
               "paired": {f"{a} - {b}": paired(finetuned[a]["seeds"], finetuned[b]["seeds"])
                          for a, b in (("general+domain", "general"),
                                       ("general+domain", "general+general"),
                                       ("general+general", "general"))},
               "mlm_accuracy": {arm: {k: mlm[arm][k] for k in ("emails", "general")}
                                for arm in ARMS},
               # what the figures cost: the stages' own minutes (a reused stage counts
               # the run that made it), not this invocation's
               "minutes": minutes, "total_minutes": round(sum(minutes.values()), 1)}
    with open(work("results.json"), "w") as f:
        json.dump({**summary, "seeds": {arm: finetuned[arm]["seeds"] for arm in ARMS},
                   "rows": {name: d["rows"] for name, d in data.items()},
                   "settings": vars(args)}, f, indent=2)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
