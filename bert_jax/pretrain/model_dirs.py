"""The models a pretraining checkpoint writes beside its state.

The objective's `models_beside` (ELECTRA's generator), each a model directory of its own in
WORKDIR."""

from __future__ import annotations

from typing import Callable

from jax.experimental import multihost_utils

from bert_jax.host import paths
from bert_jax.train import multihost
from bert_jax.train.objective import Objective
from bert_jax.weights import pretrained


def save_models_beside(objective: Objective, workdir: str, tokenizer,
                       message: Callable[[str], None]) -> Callable:
    """A checkpoint's save step that writes `objective.models_beside` as WORKDIR/NAME.

    The step is `lifecycle.Checkpointing.beside`, run by every process at each checkpoint, a stop's
    included; it writes the models of the state's parameters, each replaced atomically (a temporary
    sibling, then renamed), so a stopped or preempted run's are its last checkpoint's."""
    def save(loop) -> None:
        models = objective.models_beside(loop.state.params)
        if not models:
            return
        # Host copies on every process (the parameters may span processes).
        params = multihost_utils.process_allgather(
            {name: p for name, (_, p) in models.items()}, tiled=True)
        if not multihost.is_primary():
            return
        for name, (config, _) in models.items():
            path = paths.join(workdir, name)
            pretrained.save(path, config, params[name], tokenizer=tokenizer, overwrite=True)
            if loop.is_last:
                message(f"wrote the {name} to {path}")
    return save
