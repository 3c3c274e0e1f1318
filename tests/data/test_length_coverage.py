"""Token-length coverage: percentiles and truncation counts in create-data and finetune,
and fine-tuning's `max_seq_length=auto`."""

import json

import numpy as np
import pytest

from bert_jax.data import cli as data_cli
from bert_jax.data import lengths
from bert_jax.finetune import job
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer

from helpers.finetune import micro_config


def test_percentiles_cover_their_share_and_auto_rounds_up_to_eight():
    data = np.arange(1, 101)
    assert lengths.percentiles(data) == {"p50": 50, "p90": 90, "p95": 95, "p99": 99, "max": 100}
    report = lengths.coverage(data, 64)
    assert (report["examples"], report["truncated"]) == (100, 36)
    assert lengths.covering_length(data, limit=512) == 96  # 95 -> the next multiple of 8
    assert lengths.covering_length(data, limit=80) == 80  # capped by the position table
    assert lengths.covering_length([3, 4], limit=512) == 8
    assert "max_seq_length 64 truncates 36 (36.0%)" in lengths.describe_coverage(report, "rows")


def test_create_data_reports_document_lengths_and_truncated_pairs(tmp_path, capsys):
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    documents = [["a short first document ."],
                 ["one sentence here .", "and another one that is a little longer ."],
                 [" ".join(["word"] * 60) + " .", "then the end ."]]
    text = tmp_path / "in.txt"
    text.write_text("\n\n".join("\n".join(d) for d in documents) + "\n")
    out = tmp_path / "out"
    assert data_cli.create_data_main(["--input", str(text), "--output", str(out), "--num_shards",
                                      "1", "--dupe_factor", "1", "--max_seq_length", "32",
                                      "--num_workers", "1", "--no_progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    sizes = [sum(len(tokenizer.encode(s).ids) for s in d) for d in documents]
    assert summary["document_tokens"] == lengths.percentiles(sizes)
    assert summary["document_tokens"]["max"] == max(sizes) > 60
    # The 61-token sentence cannot fit a 32-token row whole.
    assert 1 <= summary["truncated_instances"] <= summary["instances"]
    printed = capsys.readouterr().out
    assert "truncated" in printed and "summary.json" not in printed.split("\n")[0]


TEXTS = [" ".join(["good"] * n) for n in range(1, 21)]  # 3 .. 22 tokens with [CLS], [SEP]


def finetune_auto(tmp_path, *overrides):
    path = tmp_path / "train.tsv"
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(TEXTS)))
    config = micro_config("csv", f"train_file={path}", f"validation_file={path}",
                          "text_column=text", "label_column=label", "num_train_epochs=1",
                          "max_seq_length=auto", *overrides)
    return job.finetune(config, str(tmp_path / "run"))


@pytest.mark.long
def test_auto_max_seq_length_covers_95_percent_and_is_recorded(tmp_path, capsys):
    from bert_jax.weights import pretrained
    results = finetune_auto(tmp_path)
    # 19 of the 20 examples (95%) have at most 21 tokens: the next multiple of 8 is 24.
    assert results["max_seq_length"] == 24
    coverage = results["length_coverage"]
    assert coverage["auto"] and coverage["max_seq_length"] == 24
    assert (coverage["p50"], coverage["p95"], coverage["max"], coverage["truncated"]) == (
        12, 21, 22, 0)
    assert "token lengths of 20 train examples: p50 12" in capsys.readouterr().err
    task = pretrained.load(str(tmp_path / "run" / "best")).task
    assert task["max_seq_length"] == task["config"]["max_seq_length"] == 24
    saved = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert saved["max_seq_length"] == 24


@pytest.mark.slow
def test_auto_is_capped_by_the_position_table(tmp_path):
    model = ("{'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 32, "
             "'num_attention_heads': 2, 'intermediate_size': 64, "
             "'max_position_embeddings': 16}")
    results = finetune_auto(tmp_path, f"model={model}")
    assert results["max_seq_length"] == 16
    assert results["length_coverage"]["truncated"] == 6  # 17 .. 22 tokens


def test_a_non_number_other_than_auto_is_refused():
    from bert_jax.errors import UserError
    with pytest.raises(UserError, match="max_seq_length"):
        micro_config("csv", "max_seq_length=long")
