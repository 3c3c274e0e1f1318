"""A fine-tuning task's data as a run uses it, and the task's model.

Examples read and subsampled, featurized with the model's tokenizer, checked and warned about (a
vocabulary that misses the text, a single class, validation data equal to the training data)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import flax.linen as nn
import numpy as np

from bert_jax.data import lengths
from bert_jax.errors import UserError
from bert_jax.host import paths
from bert_jax.tokenization import chars
from bert_jax.tokenization.base import uncovered_text_warning
from bert_jax.train import run_config

log = logging.getLogger("bert_jax.finetune")


@dataclasses.dataclass
class TaskData:
    """One data set of a task: the task, its features, eval sets, test examples, model and steps.

    The task has its labels read from the training subset; then the training features, the eval
    sets, the test splits' examples (read and checked before training, predicted after it), the task
    model, and the steps a job compiled for them (`compiled`, kept with the data they were compiled
    for)."""

    task: Any
    train_features: list
    eval_sets: dict
    test_sets: dict
    model: nn.Module
    compiled: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """What reading and featurizing a task's data takes from the run config.

    The keys of the same names."""

    max_seq_length: int
    max_train_examples: int
    max_eval_examples: int
    train_file: str
    validation_file: str

    @classmethod
    def of(cls, config) -> "DataSettings":
        return cls(**{field.name: config[field.name] for field in dataclasses.fields(cls)})


@dataclasses.dataclass
class TrainingSplit:
    """A task's training split, read once (`read`), with the task prepared on all of it.

    `new_task` builds another task of the run, for a subset, which reads its own labels."""

    task: Any
    examples: list
    new_task: Callable[[], Any]

    @classmethod
    def read(cls, task, new_task: Callable[[], Any]) -> "TrainingSplit":
        examples = task.load("train")
        task.prepare(examples)
        return cls(task, examples, new_task)

    def subset(self, limit: int, seed: int) -> tuple[Any, list]:
        """(task, examples): `limit` examples drawn with `seed` and the task prepared on them.

        `limit` 0 takes all of them, and the task is then the split's own."""
        examples = subsample(self.examples, limit, seed)
        if examples is self.examples:
            return self.task, examples
        task = self.new_task()
        task.prepare(examples)
        return task, examples


def prepare(split: TrainingSplit, source, settings: DataSettings, seed: int,
            wrap_model=None) -> TaskData:
    """The task's data featurized with `source.tokenizer`, with the task's model.

    The training `split` and the eval examples, subsampled with `seed` when
    `settings.max_train_examples` / `max_eval_examples` say so; the task's model is on
    `source.config` (wrapped by `wrap_model` if given). Reads and checks the test splits' labels
    now, and warns about data that would teach nothing measurable."""
    tokenizer = source.tokenizer
    task, examples = split.subset(settings.max_train_examples, seed)
    train_features = task.featurize(examples, tokenizer, settings.max_seq_length,
                                    training=True)
    if not train_features:
        raise UserError(f"task {task.name!r}: no training features")
    _warn_if_uncovered(tokenizer, train_features, f"task {task.name!r}'s training data",
                       examples)
    warn_if_degenerate(task, settings.train_file, settings.validation_file)
    test_sets = {}
    for name in task.test_splits:  # predicted after training; a bad file fails now
        test_sets[name] = task.load(name)
        try:
            task.check_labels(test_sets[name])
        except ValueError as e:
            raise UserError(f"the {name} split: {e}") from e
    model = task.model(source.config)
    if wrap_model is not None:
        model = wrap_model(model)
    eval_sets = load_eval_sets(task, tokenizer, settings.max_seq_length,
                               settings.max_eval_examples, seed)
    return TaskData(task, train_features, eval_sets, test_sets, model)


def subsample(items: list, limit: int, seed: int) -> list:
    if not limit or len(items) <= limit:
        return items
    keep = np.sort(np.random.default_rng(seed).permutation(len(items))[:limit])
    return [items[i] for i in keep]


def load_eval_sets(task, tokenizer, max_seq_length: int, max_examples: int,
                   seed: int) -> dict[str, tuple[list, list]]:
    """{split: (examples, features)} for the eval splits.

    Each is subsampled to `max_examples` with `seed` (0: all)."""
    sets = {}
    for split in task.eval_splits:
        examples = subsample(task.load(split), max_examples, seed)
        sets[split] = (examples, task.featurize(examples, tokenizer, max_seq_length,
                                                training=False))
    return sets


def _strings(value):
    """The strings in an example's value (a text, a word list, a dict of texts)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


def _warn_if_uncovered(tokenizer, features: list, what: str, examples: list) -> None:
    """Warns when the vocabulary turns much of the text into [UNK].

    It looks at up to 1000 features; it speaks of Chinese only when the examples' text is mostly
    CJK."""
    rows = []
    for feature in features[:1000]:
        ids = feature["input_ids"]  # a row, or one row per choice (multiple choice)
        rows += [np.asarray(r).reshape(-1) for r in
                 (ids if len(ids) and not np.isscalar(ids[0]) else [ids])]
    ids = np.concatenate(rows)
    special = np.isin(ids, [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id])
    warning = uncovered_text_warning(int((ids == tokenizer.unk_id).sum()),
                                     int((~special).sum()), what,
                                     chars.cjk_share(_strings(examples[:1000])))
    if warning:
        log.warning(warning)


def warn_if_degenerate(task, train_file: str, validation_file: str) -> None:
    """Warns about training data that runs but teaches nothing measurable.

    A single class, or a `validation_file` with the `train_file`'s text."""
    names = getattr(task, "label_names", None)
    if names is not None and len(names) == 1:
        log.warning("task %r: every training example has the label %r: the model can only "
                    "learn to predict it, and its accuracy says nothing", task.name, names[0])
    train, dev = train_file, validation_file
    try:
        same = bool(train and dev) and paths.getsize(train) == paths.getsize(dev) and \
            paths.read_bytes(train) == paths.read_bytes(dev)
    except OSError:  # not plain files (a glob, a list): not compared
        same = False
    if same:
        log.warning("validation_file %s holds the training file's text (%s): its scores "
                    "measure memorisation, not generalisation", dev, train)


# A length no example reaches: featurized with it, nothing is truncated.
UNLIMITED_LENGTH = 1 << 30


def untruncated_lengths(task, examples: list, tokenizer) -> list[int]:
    """Token lengths of `examples` before truncation (`task` prepared on them).

    [CLS] and [SEP]s are included; a multiple-choice example's is its longest choice's."""
    sizes = []
    for feature in task.featurize(examples, tokenizer, UNLIMITED_LENGTH, training=False):
        ids = feature["input_ids"]
        nested = len(ids) and isinstance(ids[0], (list, tuple, np.ndarray))
        sizes.append(max(map(len, ids)) if nested else len(ids))
    return sizes


def resolve_max_seq_length(config, train_lengths: list[int], max_positions: int):
    """The run's config with `max_seq_length="auto"` resolved.

    A copy of `config` with the smallest multiple of 8 that covers 95% of `train_lengths`, at most
    `max_positions` (the model's position table); `config` itself when it names a length."""
    if config.max_seq_length != "auto":
        return config
    return run_config.derive(config, max_seq_length=lengths.covering_length(
        train_lengths, max_positions))


def length_coverage(train_lengths: list[int], max_seq_length: int, auto: bool
                    ) -> dict[str, Any]:
    """`lengths.coverage` of the training examples at the run's `max_seq_length`.

    And whether that length was resolved from "auto"."""
    return {**lengths.coverage(train_lengths, max_seq_length), "auto": auto}
