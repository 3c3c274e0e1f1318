"""TinyBERT's general distillation in pretraining (`--config.teacher` with hidden_weight /
attention_weight, bert_jax/pretrain/distill.py): a student half its teacher's width learns
the teacher's hidden states through a projection kept in the run's state, resumes exactly,
and fine-tunes without it."""

import os
import shutil

import jax
import numpy as np
import pytest

from bert_jax.finetune import job as finetune_job
from bert_jax.models.matching import PROJECTION
from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.tokenization import load_tokenizer
from bert_jax.train import checkpoint
from bert_jax.weights import pretrained

from helpers.finetune import micro_config
from helpers.pretrain import distill_config, run_cli, train_records

# The student: 16 wide against the 32-wide teacher, the teacher's 2 heads.
MATCHING = dict(hidden_weight=1.0, attention_weight=1.0, num_train_steps=6,
                learning_rate=1e-2, warmup_steps=0, checkpoint_every_steps=3,
                eval_every_steps=0)


@pytest.mark.long
def test_a_narrower_student_learns_the_teacher_s_states_resumes_and_fine_tunes(
        tmp_path, text_corpus, teacher_workdir, capsys):
    straight = str(tmp_path / "straight")
    train_and_evaluate(distill_config(text_corpus, teacher_workdir, **MATCHING), straight)
    assert "hidden_weight=1, attention_weight=1" in capsys.readouterr().err
    records = train_records(straight)
    assert [r["step"] for r in records] == list(range(1, 7))
    for r in records:  # loss = alpha * MLM + (1 - alpha) * soft + hidden + attention + NSP
        assert r["train/attention_loss"] > 0
        assert r["train/loss"] == pytest.approx(
            0.5 * r["train/mlm_loss"] + 0.5 * r["train/soft_loss"] + r["train/hidden_loss"]
            + r["train/attention_loss"] + r["train/nsp_loss"], rel=1e-5)
    for name in ("loss", "hidden_loss"):
        assert records[-1][f"train/{name}"] < records[0][f"train/{name}"], name

    # The projection 16 -> 32 is in the run's state, trained and checkpointed ...
    state = checkpoint.latest_params(straight)
    assert state[PROJECTION]["kernel"].shape == (16, 32)
    # ... and resumed: the run cut after step 3 ends where the straight one ends.
    resumed = str(tmp_path / "resumed")
    shutil.copytree(straight, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "6"))
    train_and_evaluate(distill_config(text_corpus, teacher_workdir, **MATCHING), resumed)
    assert "resumed from step 3 of" in capsys.readouterr().err
    jax.tree.map(np.testing.assert_array_equal, checkpoint.latest_params(resumed), state)

    # The model the workdir gives is the student alone, and it fine-tunes.
    student = pretrained.load(straight)
    assert PROJECTION not in student.params and student.config.hidden_size == 16
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"{i % 2}\tthe river and the sea {i}\n" for i in range(8)))
    results = finetune_job.finetune(micro_config(
        "csv", f"init_from={straight}", "model=", f"train_file={train}",
        f"validation_file={train}", "columns=label,text", "num_train_epochs=1"),
        str(tmp_path / "finetuned"))
    assert 0 <= results["validation"]["accuracy"] <= 1


def test_attention_maps_of_other_head_counts_are_refused_in_one_line(
        tmp_path, text_corpus, teacher_workdir, capsys):
    workdir = str(tmp_path / "run")
    student = ("{'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 16, "
               "'num_attention_heads': 1, 'intermediate_size': 32, "
               "'max_position_embeddings': 64}")
    assert run_cli(text_corpus, workdir, f"--config.teacher={teacher_workdir}",
                   f"--config.model={student}", "--config.attention_weight=1") == 2
    err = capsys.readouterr().err
    assert "student has 1 heads and the teacher 2" in err and err.count("\n") == 1, err
    assert not os.path.exists(workdir)


@pytest.fixture
def headless_teacher(tmp_path, teacher_workdir):
    """The test teacher's encoder saved alone, as a sentence encoder is (no MLM head)."""
    loaded = pretrained.load(teacher_workdir)
    path = str(tmp_path / "encoder_only")
    pretrained.save(path, loaded.config, {"bert": loaded.params["bert"]},
                    tokenizer=load_tokenizer(loaded.tokenizer_dir))
    return path


@pytest.mark.long
def test_a_teacher_without_an_mlm_head_teaches_its_states_with_alpha_1(
        tmp_path, text_corpus, teacher_workdir, headless_teacher):
    settings = dict(MATCHING, alpha=1.0, num_train_steps=4, checkpoint_every_steps=4)
    headless = str(tmp_path / "headless")
    train_and_evaluate(distill_config(text_corpus, headless_teacher, **settings), headless)
    records = train_records(headless)
    for r in records:  # loss = MLM + hidden + attention + NSP: no soft loss, no KL
        assert "train/soft_loss" not in r
        assert r["train/loss"] == pytest.approx(
            r["train/mlm_loss"] + r["train/hidden_loss"] + r["train/attention_loss"]
            + r["train/nsp_loss"], rel=1e-5)
    assert records[-1]["train/hidden_loss"] < records[0]["train/hidden_loss"]

    # Its states are those of the same encoder with the head: the same losses, step by step.
    full = str(tmp_path / "full")
    train_and_evaluate(distill_config(text_corpus, teacher_workdir, **settings), full)
    for a, b in zip(records, train_records(full), strict=True):
        for name in ("hidden_loss", "attention_loss", "loss"):
            assert a[f"train/{name}"] == pytest.approx(b[f"train/{name}"], rel=1e-5), name


@pytest.mark.parametrize("overrides, message", [
    (["--config.hidden_weight=1"], "has no masked-LM head, so alpha < 1 has no logits"),
    (["--config.alpha=1"], "has no masked-LM head and hidden_weight = attention_weight = 0"),
])
def test_a_headless_teacher_without_states_to_teach_is_refused_in_one_line(
        tmp_path, text_corpus, headless_teacher, capsys, overrides, message):
    workdir = str(tmp_path / "run")
    assert run_cli(text_corpus, workdir, f"--config.teacher={headless_teacher}", *overrides) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not os.path.exists(workdir)
