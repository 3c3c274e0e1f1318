"""bench/bench_further_pretraining.py: the held-out e-mails stay out of the domain text,
stages are reused only with the same settings, and the whole bench on a micro setting
(its last line: the JSON summary)."""
from __future__ import annotations

import csv
import gzip
import json
import os
import sys

import pytest
from test_finetune_util import MICRO_MODEL, ROOT

from bert_jax.demo import unlabelled_emails

sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_further_pretraining as bench  # noqa: E402


def _tsv(path, texts):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["label", "text"])
        writer.writerows(("spam" if i % 2 else "ham", t) for i, t in enumerate(texts))
    return str(path)


def test_unlabelled_emails_reads_only_the_given_splits_without_labels(tmp_path):
    train = _tsv(tmp_path / "train.tsv", ["Buy now! Cheap pills.", "Meeting at noon. See you?"])
    dev = _tsv(tmp_path / "dev.tsv", ["Held out e-mail."])
    with gzip.open(unlabelled_emails(str(tmp_path / "t.txt.gz"), (train,)), "rt") as f:
        assert f.read() == "Buy now!\nCheap pills.\n\nMeeting at noon.\nSee you?\n\n"
    with gzip.open(unlabelled_emails(str(tmp_path / "both.txt.gz"), (train, dev)), "rt") as f:
        text = f.read()
    assert text.endswith("See you?\n\nHeld out e-mail.\n\n") and "spam" not in text


def test_stages_are_reused_only_with_the_same_settings(tmp_path):
    calls = []

    def stage(value):
        def run():
            calls.append(value)
            os.makedirs(tmp_path / "stage", exist_ok=True)
            (tmp_path / "stage" / "output").write_text(str(value))
            return {"value": value}
        return run

    first = bench.cached(str(tmp_path / "stage"), {"steps": 2, "seeds": "1,2"}, stage(1))
    assert first["value"] == 1 and first["minutes"] >= 0
    # Same settings (a tuple reads back from JSON as a list): the saved figures.
    assert bench.cached(str(tmp_path / "stage"), {"steps": 2, "seeds": "1,2"}, stage(2)) == first
    assert calls == [1]
    (tmp_path / "stage" / "stale").write_text("")
    assert bench.cached(str(tmp_path / "stage"), {"steps": 3, "seeds": "1,2"},
                        stage(3))["value"] == 3
    assert calls == [1, 3]
    assert not (tmp_path / "stage" / "stale").exists()  # a finished stale stage is emptied
    # An unfinished stage (no record) is left to its run, which may resume it.
    os.remove(tmp_path / "stage" / bench.STAGE_FILE)
    bench.cached(str(tmp_path / "stage"), {"steps": 3}, lambda: {
        "kept": (tmp_path / "stage" / "output").read_text()})
    assert json.load(open(tmp_path / "stage" / bench.STAGE_FILE))["figures"]["kept"] == "3"


@pytest.mark.slow
def test_bench_end_to_end_prints_the_summary_last(tmp_path, capsys):
    """Every stage on a micro model and a small general corpus; run again, every stage is
    reused with its figures."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"The nation {i} is strong.\nCongress met in session {i}.\n\n"
                              for i in range(60)))
    argv = ["--workdir", str(tmp_path / "run"), "--corpus", str(corpus), "--model", MICRO_MODEL,
            "--general_steps", "2", "--further_steps", "2", "--pretrain_batch", "8",
            "--eval_steps", "1", "--eval_fraction", "0.5", "--dupe_factor", "1", "--labelled", "16",
            "--epochs", "1",
            "--seeds", "1,2", "--finetune_override=--config.global_batch_size=8",
            "--finetune_override=--config.max_eval_examples=16"]
    assert bench.main(argv) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    # Both continued runs start from the general model's weights.
    assert err.count(f"initialised weights from {tmp_path / 'run' / 'pretrain_general'}\n") == 2
    assert set(summary) == {"test_accuracy", "paired", "mlm_accuracy", "minutes",
                           "total_minutes"}
    assert summary["paired"]["general+domain - general"]["seeds"] == 2
    assert set(summary["test_accuracy"]) == set(bench.ARMS) == set(summary["mlm_accuracy"])
    for arm in bench.ARMS:
        assert set(summary["test_accuracy"][arm]) == {"mean", "std"}
        assert 0 <= summary["test_accuracy"][arm]["mean"] <= 1
        assert all(0 <= a <= 1 for a in summary["mlm_accuracy"][arm].values())
    assert set(summary["minutes"]) == {"create_data", "mlm_accuracy",
                                       *(f"pretrain {a}" for a in bench.ARMS),
                                       *(f"finetune {a}" for a in bench.ARMS)}
    results = json.load(open(tmp_path / "run" / "results.json"))
    assert all(set(results["seeds"][arm]) == {"1", "2"} for arm in bench.ARMS)
    assert bench.main(argv) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {k: again[k] for k in ("test_accuracy", "mlm_accuracy", "minutes")} == \
        {k: summary[k] for k in ("test_accuracy", "mlm_accuracy", "minutes")}
