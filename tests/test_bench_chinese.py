"""bench/bench_chinese.py: People's Daily splits, the argument checks, and the whole bench
on a micro setting (its last line: the JSON summary)."""
from __future__ import annotations

import gzip
import json
import os
import sys

import pytest
from test_finetune_util import MICRO_MODEL, ROOT

from bert_jax.finetune import files
from bert_jax.tokenization import text_io

sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_chinese  # noqa: E402

PARAGRAPH = ("新华社/nt  北京/ns  一月/t  一日/t  电/n  ，/w  江/nr  泽民/nr  在/p  上海/ns  "
             "会见/v  了/u  李鹏/nr  。/w  他/r  说/v  ：/w  好/a  ！/w")


def _people_daily(directory, paragraphs=40):
    os.makedirs(directory, exist_ok=True)
    with gzip.open(os.path.join(directory, "people_daily_199801.tagged.txt.gz"), "wt",
                   encoding="utf-8") as f:
        for i in range(paragraphs):
            f.write(PARAGRAPH.replace("一日", f"{i}日") + "\n")
    return str(directory)


def test_people_daily_splits_keep_evaluation_text_out_of_the_corpus(tmp_path):
    paths = bench_chinese.people_daily_splits(_people_daily(tmp_path / "pd", 20),
                                              str(tmp_path / "text"))
    test = files.read_conll(paths["ner_test.conll"])
    assert len(test) == 2 * 2  # paragraphs 9 and 19 (8 and 18 are dev), 2 sentences each
    assert test[0]["words"][:10] == list("新华社北京一月9日电")
    assert test[0]["tags"][:10] == ["B-ORG", "I-ORG", "I-ORG", "B-LOC", "I-LOC"] + ["O"] * 5
    assert test[0]["tags"][11:14] == ["B-PER", "I-PER", "I-PER"]  # 江/nr 泽民/nr: one person
    corpus = open(paths["corpus.txt"], encoding="utf-8").read()
    assert "7日" in corpus and "17日" in corpus
    assert not any(f"{i}日" in corpus for i in (8, 9, 18, 19))  # evaluation paragraphs
    assert len(files.read_conll(paths["ner_train.conll"])) == 16 * 2


def test_missing_inputs_fail_with_one_line(tmp_path, capsys):
    assert bench_chinese.main(["--workdir", str(tmp_path), "--corpus", "c.txt"]) == 2
    assert capsys.readouterr().err == ("error: missing --ner_train, --ner_test "
                                       "(or pass --people_daily DIR)\n")
    assert bench_chinese.main(["--workdir", str(tmp_path), "--corpus", "c.txt",
                               "--ner_train", "a", "--ner_test", "b"]) == 2
    assert capsys.readouterr().err == "error: no file c.txt (or pass --people_daily DIR)\n"


@pytest.mark.slow
def test_bench_end_to_end_prints_the_summary_last(tmp_path, capsys):
    """Every stage on a micro model; a BMES NER file (the bench reads any scheme)."""
    paths = bench_chinese.people_daily_splits(_people_daily(tmp_path / "pd"),
                                              str(tmp_path / "text"))
    bmes = str(tmp_path / "train_bmes.conll")
    with open(bmes, "w", encoding="utf-8") as f:
        for sentence in files.read_conll(paths["ner_train.conll"]):
            tags = text_io.rewrite_tags(sentence["tags"], "BMES")
            f.write("".join(f"{c}\t{t}\n" for c, t in zip(sentence["words"], tags)) + "\n")
    argv = [
        "--workdir", str(tmp_path / "run"), "--corpus", paths["corpus.txt"],
        "--ner_train", bmes, "--ner_test", paths["ner_test.conll"], "--model", MICRO_MODEL,
        "--vocab_size", "200", "--dupe_factor", "1", "--pretrain_steps", "2",
        "--pretrain_batch", "8", "--eval_steps", "1", "--eval_fraction", "0.5",
        "--ner_sentences", "0", "--ner_epochs", "2", "--seeds", "1,2", "--ner_override=--config.max_seq_length=32",
        "--ner_override=--config.global_batch_size=8"]
    assert bench_chinese.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(summary) == {"mlm_accuracy", "ner_f1", "minutes"}
    assert 0 <= summary["mlm_accuracy"] <= 1
    for init in ("pretrained", "random"):
        assert set(summary["ner_f1"][init]) == {"mean", "std"}
        assert 0 <= summary["ner_f1"][init]["mean"] <= 1
    with open(tmp_path / "run" / "results.json") as f:
        runs = json.load(f)["runs"]
    assert set(runs) == {"pretrained_seed1", "pretrained_seed2", "random_seed1", "random_seed2"}
    assert all(len(r["validation_f1_per_epoch"]) == 2 for r in runs.values())
    pretraining = json.load(open(tmp_path / "run" / "results.json"))["pretraining"]
    assert pretraining["tokens_per_second"] > 0
    # Run again: every stage is reused, the pretraining with its measured figures.
    assert bench_chinese.main(argv) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["mlm_accuracy"] == summary["mlm_accuracy"]
    assert again["ner_f1"] == summary["ner_f1"]
    assert json.load(open(tmp_path / "run" / "results.json"))["pretraining"] == pretraining
