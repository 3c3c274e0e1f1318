"""Ensembles of fine-tuned models, for `bert-jax predict` and `evaluate` over several workdirs.

Or over every seed of a multi-seed workdir. Each member runs on the same features and the task
averages their outputs per feature (`Task.combine_outputs`): probabilities for classification and
multiple choice, scores for regression, start and end logits for SQuAD (so every span's score is the
members' mean), per-token tag probabilities for tagging. The average is then decoded as one model's
outputs are. Members must share the task, labels, tokenizer and max_seq_length, which decide the
features.
"""

from __future__ import annotations

import json
from typing import Sequence

from bert_jax.errors import UserError
from bert_jax.finetune import inference
from bert_jax.host import paths
from bert_jax.host.folders import FINETUNING_WORKDIR


def member_dirs(dirs: Sequence[str], expand_seeds: bool) -> list[str]:
    """The workdirs (or fine-tuned model dirs) of the members.

    With `expand_seeds`, a multi-seed workdir stands for every seed run of its selected setting."""
    out = []
    for path in dirs:
        results = paths.join(path, FINETUNING_WORKDIR.results)
        summary = {}
        if expand_seeds and paths.exists(results):
            summary = json.loads(paths.read_text(results))
        if summary.get("seeds"):
            setting = paths.dirname(summary["best_run"])
            out += [paths.join(path, setting, FINETUNING_WORKDIR.seed_dir(seed))
                    for seed in summary["seeds"]]
        else:
            out.append(path)
    return out


class Ensemble:
    """Fine-tuned models whose outputs are averaged.

    `task`, `tokenizer` and `config` are the first member's (the others are checked to featurize
    alike)."""

    def __init__(self, dirs: Sequence[str], overrides: dict | None = None):
        self.names = list(dirs)
        self.members = [inference.load_finetuned(p, overrides) for p in self.names]
        first = self.members[0]
        self.task, self.tokenizer, self.config = first.task, first.tokenizer, first.config
        for name, member in zip(self.names[1:], self.members[1:]):
            _check_same(self.names[0], first, name, member)

    def member_outputs(self, features: list[dict]) -> list[list[dict]]:
        return [member.outputs(features) for member in self.members]

    def combine(self, per_member: list[list[dict]]) -> list[dict]:
        return [self.task.combine_outputs(list(outputs)) for outputs in zip(*per_member)]

    def featurize(self, examples: list[dict]) -> list[dict]:
        return self.task.featurize(examples, self.tokenizer, self.config.max_seq_length,
                                   training=False)

    def predict_examples(self, examples: list[dict]) -> list[dict]:
        features = self.featurize(examples)
        return self.task.predict(examples, features,
                                 self.combine(self.member_outputs(features)))

    def evaluate(self, examples: list[dict]) -> dict:
        """The ensemble's metrics, with each member's under "members"."""
        features = self.featurize(examples)
        per_member = self.member_outputs(features)
        members = {name: self.task.evaluate(examples, features, outputs)
                   for name, outputs in zip(self.names, per_member)}
        return {**self.task.evaluate(examples, features, self.combine(per_member)),
                "members": members}


def _check_same(first_name, first, name, member) -> None:
    checks = {
        "task": lambda m: m.task.name,
        "labels": lambda m: m.task.spec().get("label_names"),
        "max_seq_length": lambda m: m.config.max_seq_length,
        "tokenizer": lambda m: m.tokenizer.fingerprint(),
    }
    for what, value in checks.items():
        if value(first) != value(member):
            raise UserError(f"ensemble members differ in their {what}: {first_name} and {name} "
                            "would not see the same features")
