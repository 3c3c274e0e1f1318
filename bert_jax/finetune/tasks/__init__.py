"""Task lookup: a task by name (`get_task`) or from the spec saved with a model (`from_spec`).

Importing the family modules fills the registry of `base`.

    task = get_task(config)              # config: the ConfigDict of configs/finetune.py
    task = from_spec(spec, config)       # rebuilt from the dict saved with the best model
"""

from __future__ import annotations

from typing import Any

from bert_jax.errors import UserError

# The families register themselves when imported.
from bert_jax.finetune.tasks import csv_task, glue, multiple_choice, squad, tagging  # noqa: F401
from bert_jax.finetune.tasks.base import REGISTRY, Task


def known_tasks() -> list[str]:
    return sorted(REGISTRY)


def get_task(config) -> Task:
    """The task named by `config.task`; an unknown name lists the known ones."""
    name = config.task
    if name not in REGISTRY:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(known_tasks())}")
    return REGISTRY[name](config)


def from_spec(spec: dict[str, Any], config) -> Task:
    """Rebuilds a task from `Task.spec()` (saved in the model directory)."""
    task = get_task(config)
    task.restore_spec(spec)
    return task
