"""Headerless two-column classification files (`label<TAB>text`, `text<TAB>label`) of any
extension, as Chinese news and review sets ship them; clear errors when the columns are
ambiguous."""
from __future__ import annotations

import pytest

from bert_jax.finetune import job
from bert_jax.finetune.tasks import get_task

from helpers.finetune import micro_config, shared_compilation_cache

REVIEWS = [("pos", "质量很好，物流也快，非常满意！"), ("neg", "太差了，用了两天就坏了。"),
           ("pos", "服务态度好，下次还来"), ("neg", "房间又小又脏，不推荐"),
           ("pos", "性价比高\t值得购买")]  # a tab inside the last text


def _write(path, rows, swap=False):
    path.write_text("".join(f"{t}\t{label}\n" if swap else f"{label}\t{t}\n"
                            for label, t in rows), encoding="utf-8")
    return str(path)


def _load(path, *overrides, split="train"):
    task = get_task(micro_config("csv", f"train_file={path}", *overrides))
    return task.load(split)


def test_label_text_and_text_label_of_any_extension(tmp_path):
    for name, swap, columns in (("news.txt", False, "label,text"),
                                ("reviews.data", True, "text,label")):
        path = _write(tmp_path / name, REVIEWS[:4] + [("neg", "")], swap)
        examples = _load(path, f"columns={columns}")
        assert [e["label"] for e in examples] == ["pos", "neg", "pos", "neg", "neg"]
        assert examples[0]["text_a"] == "质量很好，物流也快，非常满意！"
        assert examples[4]["text_a"] == ""


def test_wrong_field_count_names_the_line(tmp_path):
    path = _write(tmp_path / "train.tsv", REVIEWS)
    with pytest.raises(ValueError, match=r"train.tsv:5: 3 fields.*label, text.*tab inside"):
        _load(path, "columns=label,text")


def test_headerless_file_without_columns_says_what_to_set(tmp_path):
    path = _write(tmp_path / "train.tsv", REVIEWS[:4])
    with pytest.raises(ValueError, match=r"no text column .text.*first line is not a header"
                                         r".*--config.columns=label,text"):
        _load(path)


def test_header_line_with_columns_set(tmp_path):
    path = _write(tmp_path / "train.tsv", [("label", "text")] + REVIEWS[:4])
    with pytest.raises(ValueError, match=r"train.tsv:1 is a header line"):
        _load(path, "columns=label,text")


def test_swapped_columns_are_refused(tmp_path):
    rows = [("pos" if i % 2 else "neg", f"第{i}条评论：这个产品的质量和服务都值得一说，编号{i}")
            for i in range(40)]
    path = _write(tmp_path / "train.txt", rows, swap=True)
    with pytest.raises(ValueError, match=r"look swapped.*'text,label'"):
        _load(path, "columns=label,text")
    assert len(_load(path, "columns=text,label")) == 40
    with pytest.raises(ValueError, match="name each column of the file once"):
        _load(path, "columns=text")


@pytest.mark.long
def test_finetunes_from_a_headerless_chinese_file(tmp_path):
    path = _write(tmp_path / "train.txt", REVIEWS[:4] * 4)
    config = micro_config("csv", f"train_file={path}", f"validation_file={path}",
                          "columns=label,text")
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        results = job.finetune(config, str(tmp_path / "run"))
    assert 0 <= results["validation"]["accuracy"] <= 1
