"""`bert-jax pretrain`: BERT pretraining over a device mesh.

Masked LM + next sentence, or masked LM only with `--config.next_sentence_prediction=False`.

    bert-jax pretrain --config configs/pretrain.py:tiny --workdir runs/tiny \
        [--config.KEY=VALUE ...]

The job is a recipe over the shared skeleton (`bert_jax.train.lifecycle`): what the config
builds (`pretrain.setup.Setup`: the objective, optimizer, partitioner, state plan, the
jitted `train_step.train_step` of the objective; a teacher's distillation in its place
when distilling), the input files checked once and read as each process's batches
(`pretrain.inputs`), held-out evaluation as its action, and the objective's models beside
each checkpoint (`pretrain.model_dirs`).
Running the same command again resumes from WORKDIR's latest checkpoint with the same
data order, masks and dropout as an uninterrupted run.
"""

from __future__ import annotations

import contextlib

import jax
import ml_collections

from bert_jax.host import folders, outputs, paths
from bert_jax.pretrain import distill, inputs, model_dirs, start
from bert_jax.pretrain.setup import Setup
from bert_jax.train import checkpoint, lifecycle, multihost, perf, train_loop
from bert_jax.train import objective as objectives
from bert_jax.weights import pretrained


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Runs (or resumes) pretraining in `workdir`; returns the last train/eval metrics.

    Resume order: WORKDIR's latest checkpoint -> config.resume_from (any run's checkpoint of the
    same state shapes) -> config.init_from (weights only) -> scratch. Raises preemption.Preempted
    after checkpointing the step where the command's watcher (`preemption.active`) says to stop
    (`lifecycle.Job.train`)."""
    outputs.check_workdir(workdir, folders.PRETRAINING,  # once: the command's is checked
                          {"--config.init_from": config.init_from,
                           "--config.teacher": config.teacher})
    workdir = paths.abspath(workdir)
    config = start.as_resumed(config, workdir)
    # What init_from names, resolved once (a Hub model fetched and converted, a workdir's
    # model found): the tokenizer and the initial weights both read it.
    init_from = start.open_init_from(config)
    tokenizer_path, tokenizer = start.run_tokenizer(config, init_from)
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
    objective = run_setup.objective if teacher_ref is None else distill.load_distillation(
        config, teacher_ref, run_setup.objective, run["vocabulary"], partitioner=partitioner)
    # Nothing is written before this point: a config error leaves the workdir as it was.
    job = lifecycle.Job(workdir, partitioner, keep=config.keep_checkpoints)
    restored = job.restore(run_setup.state_plan.abstract, run, start_fresh=config.start_fresh,
                           resume_from=config.resume_from)
    writer = job.open_metrics(config.num_train_steps, restored)
    state = restored.state if restored else start.init_state(config, run_setup, writer,
                                                             init_from)
    if int(state.step) >= config.num_train_steps:  # a completed run, run again
        job.close()
        writer.message(f"{workdir} holds a complete run ({int(state.step)} of "
                       f"{config.num_train_steps} steps): nothing to train (raise "
                       "--config.num_train_steps to continue); its last metrics follow")
        return {"train": writer.last("train"), "eval": writer.last("eval")}
    if multihost.is_primary():  # the workdir is then loadable as a model directory
        pretrained.write_model_files(paths.join(workdir, folders.PRETRAINING_WORKDIR.model),
                                     bert_config, tokenizer=tokenizer)
    train_fn, eval_fn = run_setup.jit_steps(objective)
    process = dict(process_index=jax.process_index(), process_count=jax.process_count())
    files = inputs.prepare_input_files(run_input, sources, workdir, **process,
                                       message=writer.message, sync=multihost.sync)
    multihost.sync("input_files_ready")
    reading = dict(global_batch_size=config.global_batch_size, **process)
    batches = inputs.make_iterator(run_setup.data_options, files, tokenizer, split="train",
                                   **reading,
                                   state=restored.meta.get("pipeline") if restored else None)
    if int(state.step) == 0:
        writer.message(_first_line(config, bert_config, partitioner, teacher_ref and objective))
    loop = job.loop(config, state, train_fn, partitioner.global_batch, objective,
                    num_steps=config.num_train_steps, log_options=_log_options(config, run_setup),
                    warmup_key="warmup_steps")
    evaluation = _Evaluation(objective, eval_fn, lambda: inputs.make_iterator(
        run_setup.data_options, files, tokenizer, split="eval", **reading),
        partitioner.global_batch, config.eval_steps, writer)
    with contextlib.closing(batches):
        job.train(loop, batches, [train_loop.Every(config.eval_every_steps, evaluation,
                                                   at_end=bool(config.eval_every_steps))],
                  checkpointing=lifecycle.Checkpointing(
                      config.checkpoint_every_steps,
                      lambda loop: {**run, "pipeline": batches.get_state()},
                      beside=(model_dirs.save_models_beside(objective, workdir, tokenizer,
                                                            writer.message),)))
    return {"train": loop.last, "eval": evaluation.metrics}


class _Evaluation:
    """The held-out evaluation action, written and said; `metrics` holds the last.

    It is `objectives.evaluate` of `objective` over up to `max_steps` of `eval_batches()`."""

    def __init__(self, objective, eval_fn, eval_batches, place, max_steps: int, writer):
        self.objective, self.eval_fn, self.eval_batches = objective, eval_fn, eval_batches
        self.place, self.max_steps, self.writer = place, max_steps, writer
        self.metrics: dict = {}

    def __call__(self, loop: train_loop.Loop) -> None:
        with contextlib.closing(self.eval_batches()) as batches:
            self.metrics.update(objectives.evaluate(self.objective, self.eval_fn,
                                                    loop.state.params, batches, self.place,
                                                    self.max_steps))
        self.writer.write(loop.step, self.metrics, prefix="eval")
        self.writer.message(f"step {loop.step} eval: " + ", ".join(
            f"{k} {v:.4f}" for k, v in self.metrics.items()))


def _log_options(config, run_setup: Setup) -> train_loop.LogOptions:
    """What the run logs: tokens per second, MFU, the progress line's metrics."""
    return train_loop.LogOptions(
        config.log_every_steps, run_setup.schedule, progress=_PROGRESS,
        per_step={"tokens": config.global_batch_size * config.max_seq_length},
        flops_per_step=run_setup.model_flops_per_step(),
        peak_flops=perf.peak_flops_per_device() * jax.device_count())


def _first_line(config, bert_config, partitioner, distillation) -> str:
    """What a new run trains, on what, said once at its first step."""
    return (f"{bert_config.num_hidden_layers} layers, H={bert_config.hidden_size}, "
            f"mesh {dict(partitioner.mesh.shape)}, {jax.process_count()} process(es)"
            + (f", distilling {config.teacher} ({distillation.teacher.describe()})"
               if distillation else ""))


# What the progress line shows (metrics.jsonl has every metric).
_PROGRESS = ("loss", "soft_loss", "mlm_accuracy", "nsp_accuracy", "disc_accuracy", "replaced",
             "learning_rate", "grad_norm", "tokens_per_second", "mfu")
