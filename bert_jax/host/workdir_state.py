"""What a folder given as a model holds now, in words.

It is for the commands that read a model (predict, evaluate, embed, export, convert, distill,
fine-tuning's --model): why it holds no model yet and what to do (an interrupted run: rerun it; a
running one: wait), and the one-line note that a running fine-tune is read from the model it has
kept so far.

`folders` says which job a folder belongs to; `workdir_lock` whether a run holds it.
"""

from __future__ import annotations

from bert_jax.host import folders, paths, workdir_lock
from bert_jax.host.folders import (
    DATA,
    DISTILLATION,
    FINETUNING,
    FINETUNING_WORKDIR,
    MODEL_DIRECTORY,
    PRETRAINING,
    PRETRAINING_WORKDIR,
    TRAINING_WORKDIR,
)

# What a folder must hold to be read as a model, for the unknown-folder line.
MODEL_KINDS = (f"a model directory holds {MODEL_DIRECTORY.config}, a pretraining workdir "
               f"{PRETRAINING_WORKDIR.checkpoints}/, a fine-tuning workdir "
               f"{FINETUNING_WORKDIR.best}/")


def no_model_message(path: str) -> str:
    """One line for a folder `path` that holds no model to read.

    What it is (a run still going, one interrupted before it kept a model, data, an empty or unknown
    folder) and the next step."""
    if not paths.isdir(path):
        return (f"{path}: no such directory (a model is a model directory, a pretraining or "
                "fine-tuning workdir, or hf:ORG/NAME)")
    kind = folders.kind_of(path)
    owner = workdir_lock.live_owner(path)
    steps = TRAINING_WORKDIR.checkpoint_steps(path)
    if kind in (FINETUNING, DISTILLATION, PRETRAINING):
        command = folders.COMMANDS[kind]
        keeps = ("it keeps a model at its first evaluation" if kind != PRETRAINING
                 else "it is read from its first checkpoint")
        if owner is not None:
            return (f"{path} is a {kind} run still in progress "
                    f"({workdir_lock.describe_owner(owner)}) that has no model to read yet; "
                    f"wait: {keeps}")
        where = f"at step {steps[-1]}" if steps else "before its first checkpoint"
        if kind == PRETRAINING and steps:  # checkpoints without model/: a damaged workdir
            model_file = f"{PRETRAINING_WORKDIR.model}/{MODEL_DIRECTORY.config}"
            return (f"{path} is a pretraining workdir whose model files ({model_file}) are "
                    f"missing; rerun `{command} --workdir {path}` with its config to write "
                    "them")
        resumes = f" (it resumes from step {steps[-1]})" if steps else ""
        return (f"{path} is a {kind} run interrupted {where}, before it kept a model; rerun "
                f"the same `{command} --workdir {path}` command to finish it{resumes}")
    if kind == DATA:
        return (f"{path} holds pretraining data (bert-jax create-data), not a model; train on "
                f"it with `bert-jax pretrain --config.input_files={path}/*.tfrecord`")
    if not paths.listdir(path):
        return f"{path} is an empty folder, not a model ({MODEL_KINDS}); check the path"
    return (f"{path} is not a bert_jax model ({MODEL_KINDS}); convert published weights "
            "with `bert-jax convert`")


def running_note(workdir: str, kept: str) -> str | None:
    """The note for a reader of a workdir that a run is still writing, or None when none is.

    It is read from what the run has `kept` so far ("best/", "its latest checkpoint")."""
    owner = workdir_lock.live_owner(workdir)
    if owner is None:
        return None
    return (f"{workdir} is still being trained ({workdir_lock.describe_owner(owner)}): "
            f"answering from the model it has kept so far ({kept}), which may still change; "
            "wait for the run to end for its final model")
