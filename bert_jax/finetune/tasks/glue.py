"""The GLUE tasks, with their official metrics and GLUE server submission files.

Read through tensorflow-datasets (`glue/NAME`) or from the published `glue_data/` folders
(`--config.glue_dir`, `bert_jax.finetune.tasks.glue_files`).

`ax` (the diagnostic set) has no training data of its own: like the GLUE baselines
it trains and validates on MNLI and writes its test predictions to AX.tsv.
"""

from __future__ import annotations

import dataclasses
import functools

from bert_jax.finetune import files
from bert_jax.finetune.tasks import glue_files
from bert_jax.finetune.tasks.base import register
from bert_jax.finetune.tasks.classification import ClassificationTask
from bert_jax.host import paths
from bert_jax.host.folders import FINETUNING_WORKDIR

_NLI3 = ["entailment", "neutral", "contradiction"]
_NLI2 = ["entailment", "not_entailment"]


@dataclasses.dataclass(frozen=True)
class GlueSpec:
    text_keys: tuple[str, str | None]
    label_names: list[str] | None          # None: regression (STS-B)
    metric: str
    submissions: dict[str, str]            # test split -> submission file name
    eval_splits: tuple[str, ...] = ("validation",)
    numeric_predictions: bool = True       # 0/1 in the submission, else label names
    dataset: str = ""                      # tfds name if not glue/<task>
    train_dataset: str = ""                # for ax: train/validate on MNLI


GLUE = {
    "cola": GlueSpec(("sentence", None), ["unacceptable", "acceptable"], "matthews",
                     {"test": "CoLA.tsv"}),
    "sst2": GlueSpec(("sentence", None), ["negative", "positive"], "accuracy",
                     {"test": "SST-2.tsv"}),
    "mrpc": GlueSpec(("sentence1", "sentence2"), ["not_equivalent", "equivalent"],
                     "f1_accuracy", {"test": "MRPC.tsv"}),
    "qqp": GlueSpec(("question1", "question2"), ["not_duplicate", "duplicate"],
                    "f1_accuracy", {"test": "QQP.tsv"}),
    "stsb": GlueSpec(("sentence1", "sentence2"), None, "pearson_spearman",
                     {"test": "STS-B.tsv"}),
    "mnli": GlueSpec(("premise", "hypothesis"), _NLI3, "accuracy",
                     {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
                     eval_splits=("validation_matched", "validation_mismatched"),
                     numeric_predictions=False),
    "qnli": GlueSpec(("question", "sentence"), _NLI2, "accuracy", {"test": "QNLI.tsv"},
                     numeric_predictions=False),
    "rte": GlueSpec(("sentence1", "sentence2"), _NLI2, "accuracy", {"test": "RTE.tsv"},
                    numeric_predictions=False),
    "wnli": GlueSpec(("sentence1", "sentence2"), ["not_entailment", "entailment"], "accuracy",
                     {"test": "WNLI.tsv"}),
    "ax": GlueSpec(("premise", "hypothesis"), _NLI3, "accuracy", {"test": "AX.tsv"},
                   eval_splits=("validation_matched",), numeric_predictions=False,
                   train_dataset="glue/mnli"),
}


class GlueTask(ClassificationTask):
    def __init__(self, config, name: str):
        self.glue = GLUE[name]
        super().__init__(config, name=name, label_names=self.glue.label_names,
                         metric=self.glue.metric)
        self.eval_splits = self.glue.eval_splits
        self.text_columns = self.glue.text_keys

    @functools.cached_property
    def test_splits(self):
        splits = tuple(self.glue.submissions)
        glue_dir = self.config.glue_dir
        if glue_dir:  # a glue_data folder may lack a test file: no submission (one warning)
            return tuple(s for s in splits if glue_files.split_path(glue_dir, self.name, s))
        return splits

    def _dataset(self, split: str) -> str:
        if self.glue.train_dataset and split not in self.glue.submissions:
            return self.glue.train_dataset
        return self.glue.dataset or f"glue/{self.name}"

    def load(self, split):
        if self.config.glue_dir:
            return glue_files.load_split(self.config.glue_dir, self.name, split, self.label_names)
        rows = files.tfds_examples(self._dataset(split), split,
                                   data_dir=self.config.tfds_data_dir,
                                   download=self.config.tfds_download,
                                   otherwise="or read GLUE's own files (download_glue_data.py) "
                                             "with --config.glue_dir=PATH/glue_data")
        key_a, key_b = self.glue.text_keys
        return [{"text_a": files.text(r[key_a]),
                 "text_b": None if key_b is None else files.text(r[key_b]),
                 "label": float(r["label"]) if self.is_regression else int(r["label"]),
                 "idx": int(r["idx"])} for r in rows]

    def write_test_predictions(self, records, split, workdir):
        """GLUE server format: `index<TAB>prediction`, sorted by index."""
        path = paths.join(workdir, FINETUNING_WORKDIR.submissions, self.glue.submissions[split])
        paths.makedirs(paths.dirname(path))
        with paths.open(path, "w", encoding="utf-8") as f:
            f.write("index\tprediction\n")
            for record in sorted(records, key=lambda r: r["idx"]):
                if self.is_regression:
                    value = f"{min(5.0, max(0.0, record['score'])):.3f}"
                elif self.glue.numeric_predictions:
                    value = str(self.label_names.index(record["label"]))
                else:
                    value = record["label"]
                f.write(f"{record['idx']}\t{value}\n")
        return path


for _name in GLUE:
    register(_name)(lambda config, _n=_name: GlueTask(config, _n))
