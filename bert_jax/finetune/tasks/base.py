"""The task interface and the registry the task families add themselves to (with `register`).

`bert_jax.finetune.tasks` looks tasks up. Split from it so the families import this module and
nothing imports them back.

A task owns everything that differs between fine-tuning problems: where its data
comes from, how examples become features, the head, the loss, what the eval step
returns, the metrics and the prediction format. `bert_jax.finetune.job` is the
one loop that runs them all.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import flax.linen as nn
import jax
import numpy as np

from bert_jax.errors import UserError
from bert_jax.models import task_heads
from bert_jax.models.config import BertConfig

Array = jax.Array
Example = dict
Feature = dict


class Task:
    """Base class; see the classification, tagging and squad modules for the families."""

    name: str = ""
    sequence_keys: tuple[str, ...] = ()   # per-token feature keys, padded like input_ids
    supports_packing: bool = False
    eval_splits: tuple[str, ...] = ("validation",)
    test_split: str | None = "test"
    selection_metric: str = "accuracy"    # higher is better; picks the best checkpoint
    loaded_from: str = ""                 # the model directory it was restored from, if any

    def __init__(self, config):
        self.config = config

    @property
    def test_splits(self) -> tuple[str, ...]:
        """The splits predicted after training (GLUE's MNLI has two)."""
        return (self.test_split,) if self.test_split else ()

    def model_name(self) -> str:
        """How messages name the model: '--model DIR' when restored from one."""
        return f"--model {self.loaded_from}" if self.loaded_from else f"the {self.name!r} model"

    # --- data (host) ---
    def load(self, split: str) -> list[Example]:
        """Labeled examples of a split (`train`, an eval split or the test split)."""
        raise NotImplementedError

    def prepare(self, train_examples: list[Example]) -> None:
        """Fixes what depends on the training data (e.g. the label set of a CSV)."""

    def check_labels(self, examples: list[Example]) -> None:
        """Raises UserError for a label training did not see.

        Called on every split before the first step, not after training."""

    def is_labeled(self, example: Example) -> bool:
        """Whether an example has a gold answer (test splits often do not)."""
        return example.get("label") is not None

    def restore_spec(self, spec: dict[str, Any]) -> None:
        """The inverse of `spec()` for what `prepare` decided."""

    def head(self) -> task_heads.Head:
        """The head this task trains (a kind of `task_heads.HEADS` and its settings).

        Recorded with the saved model (`spec`): export, conversion to Hugging Face and the NNX
        bridge read it there."""
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        """JSON description saved with the model.

        The name, the head (`head`) and what `prepare` decided; `from_spec` rebuilds the task from
        it."""
        return {"name": self.name, **self.head().record()}

    def featurize(self, examples: list[Example], tokenizer, max_seq_length: int, *,
                  training: bool) -> list[Feature]:
        """Examples -> features with `input_ids`, `segment_ids` and a `feature_index`.

        One example may give several features (SQuAD windows) or none (training only)."""
        raise NotImplementedError

    def read_inputs(self, path: str) -> list[Example]:
        """Unlabeled examples for `bert-jax predict`."""
        raise NotImplementedError

    def examples_from_inputs(self, inputs: list) -> list[Example]:
        """Unlabeled examples from Python values (`Finetuned.predict`).

        Texts, text pairs, word lists or question/context dicts, as the family takes."""
        raise NotImplementedError

    # --- model (device) ---
    def model(self, config: BertConfig) -> nn.Module:
        """The network: the head's kind's model, unless the task builds its own.

        The kinds' models are `task_heads.HEADS`."""
        head = self.head()
        return head.entry.module(config, head)

    def model_inputs(self, batch: dict[str, Array]) -> dict[str, Array]:
        keys = ("input_ids", "input_mask", "segment_ids", "position_ids", "example_ids")
        return {k: batch[k] for k in keys if k in batch}

    def loss(self, outputs: Any, batch: dict[str, Array]) -> dict[str, tuple[Array, Array]]:
        """The training loss and metrics to log from the model outputs of a training batch.

        Each a (weighted sum, weight) pair (`bert_jax.models.losses`): {"loss": ..., ...}."""
        raise NotImplementedError

    def check_distillable(self) -> None:
        """Raises UserError when a student cannot learn this task's outputs.

        Called before a distillation starts."""

    def soft_loss(self, student: Any, teacher: Any, batch: dict[str, Array],
                  temperature: float) -> tuple[Array, Array]:
        """Distillation's distance from the student's model outputs to the teacher's.

        On a training batch (`bert_jax.finetune.distill`), as (weighted sum, weight)."""
        raise UserError(f"task {self.name!r} cannot be distilled")

    def eval_outputs(self, outputs: Any, batch: dict[str, Array]) -> dict[str, Array]:
        """What the eval step returns per feature: arrays [B, ...]."""
        raise NotImplementedError

    def combine_outputs(self, outputs: list[dict[str, Any]]) -> dict[str, Any]:
        """One feature's outputs from several models (an ensemble) as one model's.

        The mean of each (probabilities, scores, logits)."""
        return {key: np.mean([o[key] for o in outputs], axis=0) for key in outputs[0]}

    # --- results (host) ---
    def evaluate(self, examples: list[Example], features: list[Feature],
                 outputs: list[dict[str, Any]]) -> dict[str, float]:
        """Metrics from per-feature outputs (outputs[i] belongs to features[i])."""
        raise NotImplementedError

    def predict(self, examples: list[Example], features: list[Feature],
                outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One JSON-serialisable record per example."""
        raise NotImplementedError

    def write_test_predictions(self, records: list[dict[str, Any]], split: str,
                               workdir: str) -> str | None:
        """Writes a submission file for the test split; returns its path (or None)."""
        return None


def check_column_roles(roles: dict[str, Any]) -> None:
    """Refuses a configuration that gives one column two roles (the text is also the label).

    `roles`: {config key: the column it names (a name, a list of names, or empty for none)}; the
    same rule for every task that reads columns."""
    seen: dict[str, str] = {}
    for key, named in roles.items():
        for column in [named] if isinstance(named, str) else list(named or ()):
            if not column:
                continue
            if column in seen:
                raise UserError(f"--config.{seen[column]} and --config.{key} both name column "
                                f"{column!r}: a column plays one role; name another")
            seen[column] = key


def unseen_label(value, known: list, where: str | None, noun: str = "label") -> UserError:
    """The one refusal of an eval or test label (a tag) that the training data does not have.

    Every task family raises it (classification, tagging, multiple choice): the label, the
    training's labels and the example's file:line."""
    shown = repr(list(known[:20]))[:-1] + (", ...]" if len(known) > 20 else "]")
    return UserError(f"{noun} {value!r} is not among the training {noun}s {shown}"
                     f"{f' ({where})' if where else ''}: the model never learned it; correct "
                     f"the {noun}, or add examples of it to the training data")


def check_known_labels(labels: Iterable[tuple[Any, str | None]], known: list,
                       noun: str = "label") -> None:
    """Raises `unseen_label` for the first (label, where) pair whose label is not in `known`.

    None (an unlabeled example) passes."""
    allowed = set(known)
    for value, where in labels:
        if value is not None and value not in allowed:
            raise unseen_label(value, known, where, noun)


def regression_target(value, where: str | None) -> float:
    """A regression label as a float; a text that is no number, NaN or an infinity fails.

    The message names `where` (file:line) and the value: one such target makes the loss NaN."""
    at = f"{where}: " if where else ""
    try:
        number = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None:
        raise UserError(f"{at}regression labels must be numbers; got {value!r}")
    if not math.isfinite(number):
        raise UserError(f"{at}regression label {value!r} is not a finite number (NaN and "
                        "infinite targets make the loss NaN); correct or drop the row")
    return number


REGISTRY: dict[str, Callable[[Any], Task]] = {}


def register(*names: str):
    """Class decorator or factory registration: `@register('sst2')`."""
    def add(factory):
        for name in names:
            REGISTRY[name] = factory
        return factory
    return add
