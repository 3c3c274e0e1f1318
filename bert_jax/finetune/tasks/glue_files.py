"""GLUE read from the `glue_data/` folders, file by file as published.

The folders google-research/bert's `run_classifier.py` and `download_glue_data.py` use; the same
examples as the tensorflow-datasets route (texts, labels, `idx` = the row's number in its file).

`--config.glue_dir` is the `glue_data` folder (holding CoLA/, SST-2/, MRPC/, STS-B/, QQP/,
MNLI/, QNLI/, RTE/, WNLI/, diagnostic/) or the task's own folder. Every file is read with
QUOTE_NONE (STS-B's and MNLI's texts hold unbalanced quotes) and a UTF-8 byte-order mark
(MRPC's msr_paraphrase header) dropped. A missing test file is skipped with a warning (no
submission); a missing train or dev file, or a file of another task, fails in one line.
"""

from __future__ import annotations

import dataclasses
import logging

from bert_jax.errors import UserError
from bert_jax.finetune import files
from bert_jax.finetune.tasks.base import regression_target
from bert_jax.host import paths

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Layout:
    folder: str                      # the task's folder in glue_data
    text: tuple[str, str | None]     # text columns (the same in every split)
    label: str                       # label column of train/dev
    label_kind: str = "index"        # index: 0/1 in the file; name: a label name; score
    headerless: tuple[str, ...] = ()  # train/dev have no header (CoLA): their columns


LAYOUTS = {
    "cola": Layout("CoLA", ("sentence", None), "label",
                   headerless=("source", "label", "original_label", "sentence")),
    "sst2": Layout("SST-2", ("sentence", None), "label"),
    "mrpc": Layout("MRPC", ("#1 String", "#2 String"), "Quality"),
    "qqp": Layout("QQP", ("question1", "question2"), "is_duplicate"),
    "stsb": Layout("STS-B", ("sentence1", "sentence2"), "score", "score"),
    "mnli": Layout("MNLI", ("sentence1", "sentence2"), "gold_label", "name"),
    "qnli": Layout("QNLI", ("question", "sentence"), "label", "name"),
    "rte": Layout("RTE", ("sentence1", "sentence2"), "label", "name"),
    "wnli": Layout("WNLI", ("sentence1", "sentence2"), "label"),
}
LAYOUTS["ax"] = LAYOUTS["mnli"]  # ax trains and validates on MNLI
# The diagnostic set: download_glue_data.py's name, then the GLUE site's.
AX_FILES = ("diagnostic/diagnostic.tsv", "AX.tsv", "diagnostic.tsv")


def file_name(split: str) -> str:
    """tfds split name -> GLUE file name: validation_matched -> dev_matched.tsv."""
    return split.replace("validation", "dev") + ".tsv"


def task_folder(glue_dir: str, name: str) -> str:
    """The task's folder: glue_dir/FOLDER, or glue_dir itself when it holds GLUE files."""
    folder = LAYOUTS[name].folder
    if paths.isdir(paths.join(glue_dir, folder)):
        return paths.join(glue_dir, folder)
    if paths.isdir(glue_dir) and any(
            paths.exists(paths.join(glue_dir, f)) for f in
            ("train.tsv", "dev.tsv", "dev_matched.tsv", "test.tsv", "test_matched.tsv")):
        return glue_dir
    raise UserError(f"--config.glue_dir {glue_dir}: neither a glue_data folder (no {folder}/ in "
                    f"it) nor {folder}'s own folder (no train.tsv, dev.tsv or test.tsv)")


def split_path(glue_dir: str, name: str, split: str) -> str | None:
    """The file of a split; None for a missing test file (then there is no submission)."""
    if name == "ax" and split.startswith("test"):
        candidates = [paths.join(glue_dir, f) for f in AX_FILES]
        found = [p for p in candidates if paths.exists(p)]
        if not found:
            log.warning("no GLUE diagnostic file (%s) in %s: no AX.tsv submission",
                        " or ".join(AX_FILES), glue_dir)
        return found[0] if found else None
    path = paths.join(task_folder(glue_dir, name), file_name(split))
    if paths.exists(path):
        return path
    if split.startswith("test"):
        log.warning("%s not found: no %s submission for %s", path, split, name)
        return None
    raise UserError(f"{path} not found: GLUE {LAYOUTS[name].folder}'s {split} split "
                    f"(--config.glue_dir {glue_dir})")


def split_of(path: str) -> str:
    return paths.basename(path).removesuffix(".tsv")


def _other_task(columns: list[str]) -> str:
    """', it looks like X's' when a header holds another task's columns."""
    for name, layout in LAYOUTS.items():
        wanted = [c for c in (*layout.text, layout.label) if c]
        if not layout.headerless and set(wanted) <= set(columns):
            return f"; it looks like {layout.folder}'s"
    return ""


def _rows(path: str, name: str, labeled: bool) -> list[dict]:
    layout = LAYOUTS[name]
    if layout.headerless and labeled:
        try:
            rows = files.read_headerless(path, list(layout.headerless))
            if rows and files.label_value(rows[0]["label"]) not in ("0", "1"):
                raise ValueError(f"{path}:1: label {rows[0]['label']!r:.40}")
        except ValueError as e:
            raise UserError(f"{str(e).split(': ')[0]}: not a GLUE {layout.folder} {split_of(path)}"
                            f" file, whose lines have no header and the 4 columns "
                            f"{', '.join(layout.headerless)}") from None
        return rows
    rows, columns = files.read_table(path)
    wanted = [c for c in (*layout.text, layout.label if labeled else None) if c]
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise UserError(f"{path} is not a GLUE {layout.folder} {'labeled' if labeled else 'test'}"
                        f" file: it lacks the column(s) {', '.join(missing)} (its header: "
                        f"{', '.join(columns)}){_other_task(columns)}")
    return rows


def _label(row, path: str, name: str, label_names: list[str] | None):
    layout, value = LAYOUTS[name], files.label_value(row[LAYOUTS[name].label])
    try:
        if layout.label_kind == "score":
            return regression_target(value, files.where(row, path))
        if layout.label_kind == "name":
            return label_names.index(value)
        label = int(value)
        if 0 <= label < len(label_names):
            return label
    except ValueError:
        pass
    expected = {"score": "a score", "name": f"one of {', '.join(label_names or [])}"}.get(
        layout.label_kind, "one of 0, 1")
    raise UserError(f"{path}:{getattr(row, 'line', '?')}: label {value!r:.40} is not {expected}")


def load_split(glue_dir: str, name: str, split: str, label_names: list[str] | None) -> list[dict]:
    """The examples of a split ({'text_a', 'text_b', 'label', 'idx'}); [] for a missing test file.

    Test files have no labels (label None)."""
    path = split_path(glue_dir, name, split)
    if path is None:
        return []
    labeled = not split.startswith("test")
    key_a, key_b = LAYOUTS[name].text
    return [{"text_a": row[key_a], "text_b": None if key_b is None else row[key_b],
             "label": _label(row, path, name, label_names) if labeled else None, "idx": n}
            for n, row in enumerate(_rows(path, name, labeled))]
