"""`bert-jax finetune | distill | evaluate | predict`.

  bert-jax finetune --config configs/finetune.py:TASK --init_from CKPT --workdir DIR \\
      [--config.KEY=VALUE ...]
  bert-jax evaluate --model DIR [DIR ...] [--ensemble] [--split SPLIT] [--file FILE]
  bert-jax predict  --model DIR [DIR ...] [--ensemble] --input FILE [--output FILE]
  bert-jax distill  --teacher FINETUNED --student PRESET_OR_MODEL_DIR --workdir DIR \\
      [--config.KEY=VALUE ...]

`finetune` with `--config.seeds=1,2,3` runs once per seed under DIR/seed_N and
writes the mean and standard deviation of every metric to DIR/eval_results.json;
with `--config.sweep.learning_rate=2e-5,3e-5,5e-5` (or `sweep.num_train_epochs`,
`sweep.global_batch_size`) it runs each setting and selects on validation
(`bert_jax.finetune.selection`); without either, it is one plain run.
`distill` trains the student on the teacher's task and data (its saved config) against
the teacher's outputs (`bert_jax.finetune.distill`); its workdir is a fine-tuning one.
`predict` reads text lines, CSV/TSV or JSONL (CoNLL or SQuAD JSON for those tasks)
and writes JSONL: labels and probabilities (classification, multiple choice), tags per
word, or answer spans.
`evaluate` and `predict` with several models (or `--ensemble`, which makes a
multi-seed workdir stand for all its seeds) run an ensemble: the members' outputs are
averaged (`bert_jax.finetune.ensemble`); `evaluate` reports each member's metrics
beside the ensemble's.
"""

from __future__ import annotations

import argparse
import json
import sys

from bert_jax import flags

DEFAULT_CONFIG = "finetune.py"  # the packaged config (see config_loader)


def finetune_main(argv: list[str]) -> int:
    """`bert-jax finetune`: parses `argv`, then fine-tunes (one run, seeds or a sweep)."""
    from bert_jax.finetune import selection
    from bert_jax.host import folders
    from bert_jax.train import job_cli
    from bert_jax.train.config_loader import load_config
    rest, overrides = job_cli.split_config_args(argv)
    parser = flags.ArgumentParser(prog="bert-jax finetune", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  deprecated={"--init": "--init_from"})
    parser.add_argument("--config", default=f"{DEFAULT_CONFIG}:sst2",
                        help="FILE.py:TASK, e.g. finetune.py:mrpc (packaged) or a path to your own")
    parser.add_argument("--init_from",
                        help="model directory, pretraining workdir or Hub model "
                             "(hf:ORG/NAME[@REVISION]) to start from")
    parser.add_argument("--workdir", required=True)
    job_cli.add_help_argument(parser, "finetune", argv)
    job_cli.add_multihost_arguments(parser)
    args = parser.parse_args(rest)
    job_cli.start_processes(args)

    def load():
        config = load_config(args.config, overrides, command="finetune")
        if args.init_from:
            config.init_from = args.init_from
        return config, {"--init_from": config.init_from, "--config.model": config.model}
    code, results = job_cli.run_job("finetune", args.workdir, folders.FINETUNING, load,
                                    selection.run_finetune)
    if results is not None:
        print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=2))
    return code


def distill_main(argv: list[str]) -> int:
    """`bert-jax distill`: parses `argv`, then distils under the workdir lock."""
    from bert_jax.host import folders
    from bert_jax.train import job_cli
    rest, overrides = job_cli.split_config_args(argv)
    parser = flags.ArgumentParser(
        prog="bert-jax distill", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="distil a fine-tuned model into a smaller one (docs/distillation.md)")
    parser.add_argument("--teacher", required=True,
                        help="fine-tuning workdir or fine-tuned model directory (or hf:...)")
    parser.add_argument("--student", required=True,
                        help="model preset (random encoder, e.g. bert-L2-H256) or model "
                             "directory / pretraining workdir / hf:ORG/NAME")
    parser.add_argument("--workdir", required=True)
    job_cli.add_multihost_arguments(parser)
    args = parser.parse_args(rest)
    job_cli.start_processes(args)
    from bert_jax.finetune import distill
    teacher = distill.load_finetuned_teacher(args.teacher)
    load = lambda: (distill.distill_config(teacher, args.student, overrides),
                    {"--teacher": [args.teacher, teacher.tokenizer_dir],
                     "--student": args.student})
    code, results = job_cli.run_job("distill", args.workdir, folders.DISTILLATION, load,
                                    lambda config, workdir: distill.distill(config, teacher,
                                                                            workdir))
    if results is not None:
        print(json.dumps(results, indent=2))
    return code


def evaluate_main(argv: list[str]) -> int:
    """`bert-jax evaluate`: parses `argv`, then evaluates one model or an ensemble."""
    parser = flags.ArgumentParser(prog="bert-jax evaluate",
                                  description="evaluate a fine-tuned workdir",
                                  deprecated={"--workdir": "--model"})
    _add_models(parser)
    parser.add_argument("--split", help="a split of the task's data (default: its eval splits)")
    parser.add_argument("--file", help="a labeled file (for file-based tasks) to evaluate on")
    parser.add_argument("--output", help="JSON results file, also printed (default: MODEL/"
                        "evaluate_results.json for one model; stdout only for several; "
                        "-: stdout only)")
    args = parser.parse_args(argv)
    from bert_jax.errors import UserError
    from bert_jax.finetune import ensemble
    from bert_jax.host import paths
    from bert_jax.host.folders import FINETUNING_WORKDIR
    if args.file and args.split:
        raise UserError("pass --split or --file, not both")
    if args.output:
        from bert_jax.host import outputs
        outputs.check_file("--output", args.output, {"--file": args.file,
                                                     "--model": args.model},
                           suffixes=(".json",))
    overrides = {"validation_file": paths.abspath(args.file)} if args.file else {}
    model = _load(args, overrides)
    task = model.task
    known = list(dict.fromkeys(["train", *task.eval_splits, *task.test_splits]))
    if args.split and args.split not in known:
        raise UserError(f"--split {args.split!r} is not a split of task {task.name!r}; "
                        f"known: {', '.join(known)}")
    # --file is read as the validation split and reported under its own name.
    splits = ({paths.basename(args.file): "validation"} if args.file else
              {split: split for split in ([args.split] if args.split else task.eval_splits)})
    results = {}
    for name, split in splits.items():
        examples = task.load(split)
        if isinstance(model, ensemble.Ensemble):
            results[name] = model.evaluate(examples)
            continue
        features = task.featurize(examples, model.tokenizer, model.config.max_seq_length,
                                  training=False)
        results[name] = task.evaluate(examples, features, model.outputs(features))
    output = args.output or (paths.join(args.model[0], FINETUNING_WORKDIR.evaluate_results)
                             if len(args.model) == 1 else None)
    print(json.dumps(results, indent=2))  # first: a folder we cannot write loses nothing
    if output and output != paths.STDOUT:
        try:
            paths.write_text(output, json.dumps(results, indent=2))
        except OSError as e:
            raise UserError(f"could not write {output} ({e.strerror or e}): the metrics are "
                            "printed above; pass --output FILE to save them elsewhere") from e
    return 0


def predict_main(argv: list[str]) -> int:
    """`bert-jax predict`: parses `argv`, then predicts one model or an ensemble."""
    parser = flags.ArgumentParser(prog="bert-jax predict",
                                  description="predict with a fine-tuned workdir",
                                  deprecated={"--workdir": "--model"})
    _add_models(parser)
    parser.add_argument("--input", required=True, help="text lines, CSV/TSV, JSONL (or CoNLL, "
                        "SQuAD JSON)")
    parser.add_argument("--output", help="JSONL file (default, or -: stdout)")
    args = parser.parse_args(argv)
    from bert_jax.errors import UserError
    from bert_jax.finetune import files
    from bert_jax.host import outputs, paths
    if args.output:  # before the work: never the input, nor a file of the model
        outputs.check_file("--output", args.output, {"--input": args.input,
                                                     "--model": args.model},
                           suffixes=(".jsonl", ".json"))
    model = _load(args)
    from bert_jax.finetune import inference
    for member in getattr(model, "members", [model]):  # an ensemble runs each member
        member.progress = inference.Progress("predict")
    examples = model.task.read_inputs(args.input)
    if not examples:
        raise UserError(f"{args.input} holds no inputs (empty, or blank lines only): nothing "
                        "to predict")
    records = model.predict_examples(examples)
    if args.output and args.output != paths.STDOUT:
        files.write_jsonl(args.output, records)
        print(f"wrote {len(records)} predictions to {args.output}", file=sys.stderr)
    else:
        for record in records:
            print(json.dumps(record, ensure_ascii=False))
    return 0


def _add_models(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, nargs="+",
                        help="fine-tuning workdir or fine-tuned model dir; several: an ensemble")
    parser.add_argument("--ensemble", action="store_true",
                        help="a multi-seed workdir stands for all its seeds (an ensemble), "
                        "not its best seed")


def _load(args, overrides: dict | None = None):
    """One fine-tuned model, or an ensemble of several (`Ensemble`)."""
    from bert_jax.finetune import ensemble, inference
    members = ensemble.member_dirs(args.model, args.ensemble)
    if len(members) == 1:
        return inference.load_finetuned(members[0], overrides)
    print(f"ensemble of {len(members)}: {', '.join(members)}", file=sys.stderr)
    return ensemble.Ensemble(members, overrides)

