"""Pretraining distillation on MLM logits (`--config.teacher`, bert_jax/pretrain/distill.py):
the loss against BERT's definition, exact resume, and the errors."""

import os
import shutil

import jax
import numpy as np
import pytest

from bert_jax.models import heads, losses
from bert_jax.models.config import BertConfig
from bert_jax.pretrain import distill
from bert_jax.pretrain import steps as pretrain_steps
from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.tokenization import WordPieceTokenizer, load_tokenizer
from bert_jax.train import train_step
from bert_jax.weights import pretrained

from helpers.pretrain import (
    distill_config,
    final_params,
    init,
    run_cli,
    train_records,
)


def pretraining_batch(rng, batch=4, length=16, predictions=3, vocab=64):
    ids = rng.integers(5, vocab, (batch, length)).astype(np.int32)
    weights = np.ones((batch, predictions), np.float32)
    weights[0, -1] = 0.0  # a padded prediction slot counts for nothing
    return {"input_ids": ids, "input_mask": np.ones_like(ids),
            "segment_ids": np.zeros_like(ids),
            "masked_lm_positions": np.tile(np.arange(1, predictions + 1, dtype=np.int32),
                                           (batch, 1)),
            "masked_lm_ids": rng.integers(5, vocab, (batch, predictions)).astype(np.int32),
            "masked_lm_weights": weights,
            "next_sentence_labels": rng.integers(0, 2, (batch,)).astype(np.int32)}


def distillation(student, teacher):
    """The distillation objective of `student` (a BertForPreTraining) and `teacher`, whose
    parameters each call passes; without dropout when called with no key."""
    return distill.MlmDistillation(pretrain_steps.BertPretraining(student), teacher,
                                   extra=None, extra_shardings=None)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.long
def test_the_loss_is_alpha_mlm_plus_the_soft_kl_over_masked_positions():
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    batch = pretraining_batch(np.random.default_rng(0))
    student, params = init(config, 0)
    teacher_model, teacher_params = init(config.replace(num_hidden_layers=2), 1, nsp=False)
    # Sharper teacher distributions: a KL far from 0, where its direction shows.
    teacher_params = jax.tree.map(lambda x: 5 * x, teacher_params)
    teacher = distill.MlmTeacher(teacher_model, temperature=2.0, alpha=0.3)
    objective = distillation(student, teacher)
    loss, metrics = train_step.combine(objective.loss_terms(params, batch, teacher_params, None),
                                       objective.coefficients)

    # The reference, written out from the definition.
    positions = batch["masked_lm_positions"]
    s = student.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                      batch["segment_ids"], positions)
    t = teacher_model.apply({"params": teacher_params}, batch["input_ids"],
                            batch["input_mask"], batch["segment_ids"], positions)
    log_p = log_softmax(np.asarray(t.mlm_logits, np.float64) / 2.0)
    log_q = log_softmax(np.asarray(s.mlm_logits, np.float64) / 2.0)
    kl = (np.exp(log_p) * (log_p - log_q)).sum(-1)
    w = batch["masked_lm_weights"]
    soft = float(4.0 * (kl * w).sum() / w.sum())
    hard, _ = train_step.combine(losses.pretraining_loss(s.mlm_logits, s.nsp_logits, batch),
                                 {"mlm_loss": 1.0, "nsp_loss": 1.0})
    assert float(metrics["soft_loss"]) == pytest.approx(soft, rel=1e-5)
    assert float(loss) == pytest.approx(
        0.3 * float(metrics["mlm_loss"]) + 0.7 * soft + float(metrics["nsp_loss"]), rel=1e-5)
    assert float(metrics["mlm_loss"]) + float(metrics["nsp_loss"]) == pytest.approx(
        float(hard), rel=1e-6)

    # A teacher with the student's own weights: the soft loss vanishes.
    same = distill.MlmTeacher(heads.BertForPreTraining(config, False), 2.0, 0.3)
    teacher_params = {k: v for k, v in params.items() if k != "nsp"}
    _, metrics = train_step.combine(
        distillation(student, same).loss_terms(params, batch, teacher_params, None), {})
    assert abs(float(metrics["soft_loss"])) < 1e-6


@pytest.mark.long
def test_micro_batch_sums_and_weights_add_up_to_the_whole_batch():
    """Every term is a (sum, weight) pair: two halves' pairs add up to the whole batch's,
    so dividing once after accumulation gives the whole batch's means (the first half has
    a padded prediction slot: averaging the halves' means would differ)."""
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    batch = pretraining_batch(np.random.default_rng(1))
    student, params = init(config, 0)
    teacher_model, teacher_params = init(config, 2, nsp=False)
    objective = distillation(student, distill.MlmTeacher(teacher_model, 1.0, 0.5))
    terms = lambda b: objective.loss_terms(params, b, teacher_params, None)
    whole = terms(batch)
    halves = [terms({k: v[i:i + 2] for k, v in batch.items()}) for i in (0, 2)]
    for name, (total, weight) in whole.items():
        assert sum(float(h[name][0]) for h in halves) == pytest.approx(float(total), rel=1e-5)
        assert sum(float(h[name][1]) for h in halves) == float(weight)
    mean_of_means = np.mean([float(losses.mean(h["soft_loss"])) for h in halves])
    assert mean_of_means != pytest.approx(float(losses.mean(whole["soft_loss"])), rel=1e-4)


@pytest.mark.slow
def test_distilled_pretraining_logs_the_soft_loss_and_resumes_exactly(
        tmp_path, text_corpus, teacher_workdir, capsys):
    straight = str(tmp_path / "straight")
    result = train_and_evaluate(distill_config(text_corpus, teacher_workdir), straight)
    assert f"distilling {teacher_workdir} (T=2, alpha=0.5)" in capsys.readouterr().err
    records = train_records(straight)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for r in records:  # loss = alpha * MLM + (1 - alpha) * soft + NSP
        assert r["train/soft_loss"] > 0
        assert r["train/loss"] == pytest.approx(
            0.5 * r["train/mlm_loss"] + 0.5 * r["train/soft_loss"] + r["train/nsp_loss"],
            rel=1e-5)
    assert set(result["eval"]) >= {"mlm_loss", "mlm_accuracy"}  # the student's own
    assert pretrained.load(straight).config.hidden_size == 16  # the student's shapes

    # Interrupted after step 2 (the same run without its last checkpoint): steps 3 and 4
    # see the same teacher outputs.
    resumed, remeshed = str(tmp_path / "resumed"), str(tmp_path / "remeshed")
    for copy in (resumed, remeshed):
        shutil.copytree(straight, copy)
        shutil.rmtree(os.path.join(copy, "checkpoints", "4"))
    train_and_evaluate(distill_config(text_corpus, teacher_workdir), resumed)
    assert "resumed from step 2 of" in capsys.readouterr().err
    jax.tree.map(np.testing.assert_array_equal, final_params(resumed), final_params(straight))
    # The same steps with student and teacher sharded over data, FSDP and tensor axes.
    train_and_evaluate(distill_config(text_corpus, teacher_workdir, **{
        "mesh_shape.data": 2, "mesh_shape.fsdp": 2, "mesh_shape.tensor": 2}), remeshed)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 final_params(remeshed), final_params(straight))

    # Another teacher on resume is refused, naming the key; the checkpoints stay.
    with pytest.raises(Exception, match="teacher .* cannot change on resume"):
        train_and_evaluate(distill_config(text_corpus, str(tmp_path / "straight")), resumed)
    assert sorted(os.listdir(os.path.join(resumed, "checkpoints"))) == ["2", "4"]


@pytest.mark.parametrize("overrides, message", [
    (["--config.temperature=0"], "temperature must be a number > 0"),
    (["--config.alpha=1.5"], "alpha must be between 0 and 1"),
    (["--config.teacher=/nonexistent/teacher"], "no such directory"),
])
def test_bad_settings_fail_before_anything_is_written(tmp_path, text_corpus, teacher_workdir,
                                                      capsys, overrides, message):
    overrides = [f"--config.teacher={teacher_workdir}", *overrides]
    workdir = str(tmp_path / "run")
    assert run_cli(text_corpus, workdir, *overrides) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not os.path.exists(workdir)


@pytest.mark.slow
def test_a_teacher_without_an_mlm_head_or_with_another_vocabulary_is_refused(
        tmp_path, text_corpus, teacher_workdir, capsys):
    loaded = pretrained.load(teacher_workdir)
    encoder_only = str(tmp_path / "encoder_only")
    pretrained.save(encoder_only, loaded.config, {"bert": loaded.params["bert"]},
                    tokenizer=load_tokenizer(loaded.tokenizer_dir))
    assert run_cli(text_corpus, str(tmp_path / "a"), f"--config.teacher={encoder_only}") == 2
    assert "has no masked-LM head" in capsys.readouterr().err

    # The same size, one token different.
    tokens = [load_tokenizer(loaded.tokenizer_dir).id_to_token(i)
              for i in range(loaded.config.vocab_size)]
    tokens[-1] = "bertjaxunseen"
    other = str(tmp_path / "other_vocab")
    pretrained.save(other, loaded.config, loaded.params, tokenizer=WordPieceTokenizer(tokens))
    assert run_cli(text_corpus, str(tmp_path / "b"), f"--config.teacher={other}") == 2
    assert "vocabulary mismatch" in capsys.readouterr().err
