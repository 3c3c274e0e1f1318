"""`bert-jax pretrain`: BERT pretraining (masked LM + next sentence, or masked LM only with
`--config.next_sentence_prediction=False`) over a device mesh.

    bert-jax pretrain --config configs/pretrain.py:tiny --workdir runs/tiny \
        [--config.KEY=VALUE ...]

The job is a recipe over the shared skeleton (`bert_jax.train.lifecycle`): what the config
builds (`pretrain.setup.Setup`: model, optimizer, partitioner, state plan, the jitted
`train_step.train_step` of the MLM/NSP loss), the input files checked once and read as
each process's batches (`pretrain.inputs`), and held-out evaluation as its action.
Running the same command again resumes from WORKDIR's latest checkpoint with the same
data order, masks and dropout as an uninterrupted run.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import ml_collections

from bert_jax.errors import UserError
from bert_jax.host import folders, outputs, paths
from bert_jax.models import matching
from bert_jax.pretrain import distill, electra, inputs
from bert_jax.pretrain.setup import Setup
from bert_jax.pretrain.steps import evaluate
from bert_jax.train import checkpoint, lifecycle, multihost, perf, train_loop
from bert_jax.train.train_state import TrainState
from bert_jax.weights import pretrained


def init_state(config, run_setup: Setup, writer,
               init_from: pretrained.ModelRef | None) -> TrainState:
    """A fresh state: random weights drawn from config.seed, with the weights of
    `init_from` (config.init_from, resolved) in place of them when set (weights only: a new
    optimizer and schedule)."""
    state = run_setup.state_plan.create(config.seed)
    if init_from is None:
        return state
    loaded = init_from.load()
    if not config.next_sentence_prediction and "nsp" in loaded.params:
        writer.message(f"MLM-only run: the NSP head of {config.init_from} is not used")
    plan, params = run_setup.state_plan, loaded.params
    if "pooler" not in params["bert"]:  # an MLM-only model's (RoBERTa's, DistilBERT's)
        fresh = jax.device_get(state.params["bert"]["pooler"])
        params = {**params, "bert": {**params["bert"], "pooler": fresh}}
        writer.message(f"{config.init_from} has no pooler: a fresh one is kept")
    if matching.PROJECTION in state.params:  # this run's distillation trains it afresh
        params = {**params, matching.PROJECTION: jax.device_get(
            state.params[matching.PROJECTION])}
    params = pretrained.init_params(
        jax.device_get(state.params) if config.partial_restore else plan.abstract.params,
        params, plan.shardings.params, drop=("nsp",), partial=config.partial_restore,
        source=config.init_from,
        missing_hint=" (set partial_restore to keep fresh values for missing ones)")
    writer.message(f"initialised weights from {config.init_from}")
    return state.replace(params=params)


def _open_init_from(config) -> pretrained.ModelRef | None:
    """config.init_from resolved (None when unset); a fine-tuned model, which lacks the
    pretraining heads, only with partial_restore."""
    if not config.init_from:
        return None
    init_from = pretrained.open_model(config.init_from)
    if init_from.task and not config.partial_restore:
        raise UserError(f"{config.init_from} is a model fine-tuned on "
                        f"{init_from.task.get('name')!r}, without the pretraining heads: "
                        "pretrain from a pretrained model, or take its encoder alone with "
                        "--config.partial_restore=true")
    return init_from


def run_tokenizer(config: ml_collections.ConfigDict,
                  init_from: pretrained.ModelRef | None) -> tuple[str, Any]:
    """(path, tokenizer) of a run: config.tokenizer, else the own of `init_from`
    (config.init_from, resolved: continued pretraining keeps the model's vocabulary, as
    fine-tuning does), else the bundled vocabulary. An explicit tokenizer must be
    init_from's vocabulary: other token ids would silently mean other words to the loaded
    embeddings."""
    from bert_jax.tokenization import DEFAULT_VOCAB, has_tokenizer, load_tokenizer
    source = init_from and init_from.tokenizer_dir
    # A model saved without its tokenizer (`pretrained.save` allows it) has none to keep.
    model_tokenizer = load_tokenizer(source) if source and has_tokenizer(source) else None
    if not config.tokenizer:
        return ((source, model_tokenizer) if model_tokenizer
                else (DEFAULT_VOCAB, load_tokenizer(DEFAULT_VOCAB)))
    path, tokenizer = config.tokenizer, load_tokenizer(config.tokenizer)
    if model_tokenizer and model_tokenizer.fingerprint() != tokenizer.fingerprint():
        raise UserError(f"tokenizer {config.tokenizer} is not the vocabulary of init_from "
                        f"{config.init_from} ({source}): drop --config.tokenizer to use the "
                        "model's")
    return path, tokenizer


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Runs (or resumes) pretraining in `workdir`; returns the last train/eval metrics.
    Resume order: WORKDIR's latest checkpoint -> config.resume_from (any run's checkpoint
    of the same state shapes) -> config.init_from (weights only) -> scratch. Raises
    preemption.Preempted after checkpointing the step where the command's watcher
    (`preemption.active`) says to stop (`lifecycle.Job.train`)."""
    outputs.check_workdir(workdir, folders.PRETRAINING,  # once: the command's is checked
                          {"--config.init_from": config.init_from,
                           "--config.teacher": config.teacher})
    workdir = paths.abspath(workdir)
    # What init_from names, resolved once (a Hub model fetched and converted, a workdir's
    # model found): the tokenizer and the initial weights both read it.
    init_from = _open_init_from(config)
    tokenizer_path, tokenizer = run_tokenizer(config, init_from)
    teacher_ref = distill.open_teacher(config)
    run_setup = Setup.build(config, tokenizer.vocab_size,
                            init_config=init_from.config if init_from else None,
                            teacher=teacher_ref and distill.teacher_bert_config(config,
                                                                                teacher_ref))
    bert_config, partitioner = run_setup.bert_config, run_setup.partitioner
    run_input = inputs.RunInput(config.input_files, run_setup.data_options, tokenizer_path,
                                tokenizer.fingerprint())
    sources = inputs.resolve_files(run_input)
    run = checkpoint.run_description(config.to_dict(), bert_config.to_dict(),
                                     tokenizer.fingerprint())
    teacher, teacher_params, teacher_shardings = _teacher(config, run_setup, run["vocabulary"],
                                                          teacher_ref)
    # Nothing is written before this point: a config error leaves the workdir as it was.
    job = lifecycle.Job(workdir, partitioner, keep=config.keep_checkpoints)
    restored = job.restore(run_setup.state_plan.abstract, run, start_fresh=config.start_fresh,
                           resume_from=config.resume_from)
    writer = job.open_metrics(config.num_train_steps, restored)
    state = restored.state if restored else init_state(config, run_setup, writer, init_from)
    if int(state.step) >= config.num_train_steps:  # a completed run, run again
        job.close()
        writer.message(f"{workdir} holds a complete run ({int(state.step)} of "
                       f"{config.num_train_steps} steps): nothing to train (raise "
                       "--config.num_train_steps to continue); its last metrics follow")
        return {"train": writer.last("train"), "eval": writer.last("eval")}
    if multihost.is_primary():  # the workdir is then loadable as a model directory
        pretrained.write_model_files(paths.join(workdir, folders.PRETRAINING_WORKDIR.model),
                                     bert_config, tokenizer=tokenizer)
    train_fn, eval_fn = run_setup.jit_steps(teacher, teacher_shardings)
    process = dict(process_index=jax.process_index(), process_count=jax.process_count())
    files = inputs.prepare_input_files(run_input, sources, workdir, **process,
                                       message=writer.message, sync=multihost.sync)
    multihost.sync("input_files_ready")
    reading = dict(global_batch_size=config.global_batch_size, **process)
    batches = inputs.make_iterator(run_setup.data_options, files, tokenizer, split="train",
                                   **reading,
                                   state=restored.meta.get("pipeline") if restored else None)
    if int(state.step) == 0:
        writer.message(_first_line(config, bert_config, partitioner, teacher))
    loop = job.loop(
        config, state, train_fn, partitioner.global_batch,
        num_steps=config.num_train_steps, schedule=run_setup.schedule, warmup_key="warmup_steps",
        step_args=() if teacher is None else (teacher_params,),
        per_step={"tokens": config.global_batch_size * config.max_seq_length},
        flops_per_step=run_setup.model_flops_per_step(),
        peak_flops=perf.peak_flops_per_device() * jax.device_count(), progress=_PROGRESS)
    eval_metrics = {}

    def evaluate_now(loop):
        with contextlib.closing(inputs.make_iterator(run_setup.data_options, files, tokenizer,
                                                     split="eval", **reading)) as eval_batches:
            eval_metrics.update(evaluate(eval_fn, loop.state.params, eval_batches,
                                         partitioner, config.eval_steps, config.disc_weight))
        writer.write(loop.step, eval_metrics, prefix="eval")
        writer.message(f"step {loop.step} eval: " + ", ".join(
            f"{k} {v:.4f}" for k, v in eval_metrics.items()))

    with contextlib.closing(batches):
        job.train(loop, batches, [train_loop.Every(config.eval_every_steps, evaluate_now,
                                                   at_end=bool(config.eval_every_steps))],
                  checkpoint_every=config.checkpoint_every_steps,
                  checkpoint_meta=electra.with_generator(  # ELECTRA: WORKDIR/generator too
                      lambda loop: {**run, "pipeline": batches.get_state()}, run_setup.model,
                      workdir, tokenizer, writer.message))
    return {"train": loop.last, "eval": eval_metrics}


def _first_line(config, bert_config, partitioner, teacher) -> str:
    """What a new run trains, on what, said once at its first step."""
    return (f"{bert_config.num_hidden_layers} layers, H={bert_config.hidden_size}, "
            f"mesh {dict(partitioner.mesh.shape)}, {jax.process_count()} process(es)"
            + (f", distilling {config.teacher} ({teacher.describe()})" if teacher else ""))


def _teacher(config, run_setup: Setup, vocabulary: str,
             teacher: pretrained.ModelRef | None) -> tuple:
    """(MlmTeacher, its parameters, their shardings) of `teacher` (`distill.open_teacher`),
    or Nones."""
    if teacher is None:
        return None, None, None
    return distill.load_mlm_teacher(config, teacher, run_setup.bert_config, vocabulary,
                                    partitioner=run_setup.partitioner)


# What the progress line shows (metrics.jsonl has every metric).
_PROGRESS = ("loss", "soft_loss", "mlm_accuracy", "nsp_accuracy", "disc_accuracy", "replaced",
             "learning_rate", "grad_norm", "tokens_per_second", "mfu")
