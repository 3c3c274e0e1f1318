"""Task distillation (`bert-jax distill`): the loss against a hand computation, runs
from a fine-tuned micro teacher (a random preset student, and a student cut from the
teacher's layers with hidden/attention matching), evaluate/predict on the result,
and the one-line errors."""

from __future__ import annotations

import json
import os
import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import cli as bert_jax_cli
from bert_jax.finetune import distill, inference, job, objective
from bert_jax.models import heads, losses, matching
from bert_jax.models.presets import preset
from bert_jax.tokenization import WordPieceTokenizer
from bert_jax.train import train_step
from bert_jax.weights import pretrained

from helpers.finetune import (
    MICRO_MODEL,
    NEGATIVE,
    POSITIVE,
    micro_config,
    shared_compilation_cache,
    write_tsv,
)

# The teacher: the micro model with two layers (the student keeps one).
TEACHER_MODEL = MICRO_MODEL.replace("'num_hidden_layers': 1", "'num_hidden_layers': 2")


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_distillation_kl_by_hand():
    student = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], np.float32)
    teacher = np.array([[2.0, 0.0, -1.0], [1.0, 1.0, 2.0]], np.float32)
    weights = np.array([1.0, 3.0], np.float32)
    for t in (1.0, 2.0, 4.0):
        p, q = softmax(teacher / t), softmax(student / t)
        kl = np.sum(p * (np.log(p) - np.log(q)), -1)
        expected = t * t * np.sum(kl * weights) / weights.sum()
        got = losses.mean(losses.distillation_kl(jnp.asarray(student), jnp.asarray(teacher),
                                                 t, jnp.asarray(weights)))
        assert float(got) == pytest.approx(expected, rel=1e-5)
    assert float(losses.mean(losses.distillation_kl(jnp.asarray(teacher),
                                                    jnp.asarray(teacher), 2.0))) \
        == pytest.approx(0.0, abs=1e-6)


def test_loss_mixes_hard_and_soft_and_alpha_one_is_fine_tuning():
    # No dropout: the student's training outputs equal its eval outputs.
    config = preset("tiny", num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                    intermediate_size=64, vocab_size=50, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    model = heads.BertForSequenceClassification(config, 3)
    ids = jnp.array([[2, 5, 7, 3, 0], [2, 9, 3, 0, 0]], jnp.int32)
    batch = {"input_ids": ids, "input_mask": (ids > 0).astype(jnp.int32),
             "segment_ids": jnp.zeros_like(ids), "label": jnp.array([1, 2]),
             "example_weights": jnp.array([1.0, 1.0])}
    init = jax.jit(lambda key: nn.unbox(model.init(key, ids)["params"]))
    student, teacher = init(jax.random.key(0)), init(jax.random.key(1))
    # Confident teacher logits, so that the soft loss is far from zero.
    teacher["classifier"]["kernel"] = teacher["classifier"]["kernel"] * 50.0
    task = job.tasks.get_task(micro_config("csv"))
    task.label_names = ["a", "b", "c"]
    key = jax.random.key(3)

    @jax.jit
    def losses_for(alpha, temperature):
        settings = dict(alpha=alpha, temperature=temperature, hidden_weight=0.0,
                        attention_weight=0.0)
        mixed = train_step.combine(
            distill.distill_loss(student, batch, teacher, key, model=model, task=task,
                                 rules=(), teacher_model=model, settings=settings),
            distill.coefficients(settings))
        plain, _ = train_step.combine(objective.task_loss(student, batch, None, key, model=model,
                                                          task=task, rules=()), {"loss": 1.0})
        logits = [model.apply({"params": p}, ids, batch["input_mask"])
                  for p in (student, teacher)]
        return mixed, plain, logits

    (loss, _), plain, _ = losses_for(1.0, 2.0)
    assert float(loss) == pytest.approx(float(plain), rel=1e-6)
    (loss, metrics), plain, (s, t) = losses_for(0.25, 3.0)
    p, q = softmax(np.asarray(t) / 3.0), softmax(np.asarray(s) / 3.0)
    soft = 9.0 * np.mean(np.sum(p * (np.log(p) - np.log(q)), -1))  # T^2 = 9
    assert soft > 0.1
    assert float(metrics["soft_loss"]) == pytest.approx(soft, rel=1e-4)
    assert float(loss) == pytest.approx(0.25 * float(plain) + 0.75 * soft, rel=1e-4)


def test_layer_choices():
    assert distill.evenly_spaced_layers(6, 2) == [0, 3]
    assert distill.evenly_spaced_layers(6, 3) == [0, 2, 4]
    assert losses.matched_layers(2, 6) == [2, 5]
    assert losses.matched_layers(1, 2) == [1]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A fine-tuned two-layer micro teacher on the sentiment rows: (workdir, config
    overrides naming its files)."""
    tmp = tmp_path_factory.mktemp("distill")
    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    files = [f"train_file={write_tsv(tmp / 'train.tsv', rows * 3)}",
             f"validation_file={write_tsv(tmp / 'dev.tsv', rows)}",
             f"test_file={write_tsv(tmp / 'test.tsv', rows)}",
             "text_column=sentence", "label_column=sentiment"]
    config = micro_config("csv", *files, f"model={TEACHER_MODEL}", "num_train_epochs=10",
                          "learning_rate=1e-2", "hidden_dropout_prob=0.0",
                          "keep_checkpoint=last")
    workdir = str(tmp / "teacher")
    with shared_compilation_cache(str(tmp / "cache")):
        job.finetune(config, workdir)
    return workdir, str(tmp)


@pytest.fixture
def teacher_cache(teacher):
    """The teacher's compilation cache, inside the test: the student's evaluate and predict
    reuse what its distillation compiled, the teacher's predict what its fine-tune did."""
    with shared_compilation_cache(os.path.join(teacher[1], "cache")):
        yield


def probabilities(workdir, texts):
    return np.array([list(r["probabilities"].values())
                     for r in inference.load_finetuned(workdir).predict(texts)])


def mean_kl(p, q):
    return float(np.mean(np.sum(p * (np.log(p) - np.log(q)), -1)))


@pytest.mark.long
def test_distill_preset_student_then_evaluate_and_predict(teacher, teacher_cache, tmp_path,
                                                          monkeypatch, capsys):
    teacher_dir, _ = teacher
    before = pretrained.load(os.path.join(teacher_dir, "best")).params
    extras = []
    run = job.Finetuning.run
    monkeypatch.setattr(job.Finetuning, "run", lambda self, c, w: extras.append(
        self.objective) or run(self, c, w))
    workdir = str(tmp_path / "student")
    assert bert_jax_cli.main([
        "distill", "--teacher", teacher_dir, "--student", "tiny", "--workdir", workdir,
        f"--config.model={MICRO_MODEL}", "--config.num_train_epochs=10",
        "--config.learning_rate=1e-2", "--config.alpha=0", "--config.temperature=1"]) == 0
    # The teacher's parameters went through every step unchanged.
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(extras[0].extra), before)
    results = json.loads(open(os.path.join(workdir, "eval_results.json")).read())
    assert results["train_steps"] == 40 and "accuracy" in results["test"]
    # The student's outputs moved from a random model's towards the teacher's.
    texts = POSITIVE + NEGATIVE
    taught, learned = probabilities(teacher_dir, texts), probabilities(workdir, texts)
    assert pretrained.load(os.path.join(workdir, "best")).config.num_hidden_layers == 1
    capsys.readouterr()
    uniform = np.full_like(taught, 0.5)
    assert mean_kl(taught, uniform) > 0.05  # a teacher worth learning from
    assert mean_kl(taught, learned) < 0.3 * mean_kl(taught, uniform)
    assert bert_jax_cli.main(["evaluate", "--model", workdir]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out)["validation"]
    out = tmp_path / "out.jsonl"
    inputs = tmp_path / "in.txt"
    inputs.write_text("a great story\n")
    assert bert_jax_cli.main(["predict", "--model", workdir, "--input", str(inputs),
                              "--output", str(out)]) == 0
    assert json.loads(out.read_text())["label"] in ("neg", "pos")
    from bert_jax.weights.convert import to_hf  # HF export reads the workdir like a fine-tuned one
    to_hf(workdir, str(tmp_path / "hf"))
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["num_hidden_layers"] == 1


@pytest.mark.long
def test_distill_teacher_layers_with_hidden_and_attention_matching(teacher, tmp_path):
    teacher_dir, _ = teacher
    config = distill.distill_config(
        distill.load_finetuned_teacher(teacher_dir), os.path.join(teacher_dir, "best"),
        ["student_layers=1", "hidden_weight=1.0", "attention_weight=1.0", "log_every_steps=1",
         "num_train_epochs=1"])
    results = distill.distill(config, distill.load_finetuned_teacher(teacher_dir),
                              str(tmp_path / "student"))
    saved = pretrained.load(str(tmp_path / "student" / "best"))
    assert saved.config.num_hidden_layers == 1
    logged = [json.loads(line) for line in open(tmp_path / "student" / "metrics.jsonl")]
    train = [m for m in logged if "train/hidden_loss" in m]
    assert train and all(m["train/attention_loss"] >= 0 for m in train)
    assert results["train_steps"] == 4


# A narrower student with fewer heads: 16 wide, 1 head (the teacher: 32 wide, 2 heads).
NARROW_MODEL = ("{'preset': 'tiny', 'num_hidden_layers': 2, 'hidden_size': 16, "
                "'num_attention_heads': 1, 'intermediate_size': 32}")


@pytest.mark.long
@pytest.mark.parametrize("student, teacher, albert", [
    ((16, 1), (32, 2), False),  # narrower, fewer heads: heads averaged
    ((312, 12), (768, 12), False),  # TinyBERT's 312-wide student of a BERT-base-wide teacher
    ((16, 1), (32, 2), True),  # an ALBERT student: factorized embeddings, shared layers
], ids=["16x1-of-32x2", "312x12-of-768x12", "albert-16x1-of-32x2"])
def test_projection_is_trained_across_widths(student, teacher, albert):
    (width, heads_), (teacher_width, teacher_heads) = student, teacher
    config = preset("tiny", num_hidden_layers=1, hidden_size=teacher_width,
                    num_attention_heads=teacher_heads, intermediate_size=2 * teacher_width,
                    vocab_size=20, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    narrow = config.replace(hidden_size=width, num_attention_heads=heads_,
                            intermediate_size=2 * width)
    if albert:
        narrow = narrow.replace(model_type="albert", embedding_size=8, num_hidden_layers=2)
    teacher_model = heads.BertForSequenceClassification(config, 2)
    model = distill.StudentWithProjection(heads.BertForSequenceClassification(narrow, 2),
                                          teacher_width=teacher_width)
    ids = jnp.array([[2, 5, 6, 7, 3, 0]], jnp.int32)
    mask = (ids > 0).astype(jnp.int32)
    # Jitted and abstract inits: eager ones compile each op apart (seconds at width 768).
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), ids)["params"])
    assert params[distill.PROJECTION]["kernel"].shape == (width, teacher_width)
    alone = jax.eval_shape(heads.BertForSequenceClassification(narrow, 2).init,
                           jax.random.key(0), ids)
    assert set(params) - {distill.PROJECTION} == set(alone["params"])
    teacher = nn.unbox(jax.jit(teacher_model.init)(jax.random.key(1), ids)["params"])
    task = job.tasks.get_task(micro_config("csv"))
    task.label_names = ["a", "b"]
    batch = {"input_ids": ids, "segment_ids": jnp.zeros_like(ids), "input_mask": mask,
             "label": jnp.array([1]), "example_weights": jnp.ones(1)}
    settings = dict(alpha=0.0, temperature=1.0, hidden_weight=1.0, attention_weight=1.0)
    # Jitted: the loss is evaluated twice, once under the gradient and once after the step.
    loss = jax.jit(lambda p: train_step.combine(
        distill.distill_loss(p, batch, teacher, jax.random.key(2), model=model, task=task,
                             rules=(), teacher_model=teacher_model, settings=settings),
        distill.coefficients(settings)))
    (value, metrics), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    assert np.isfinite(float(value)) and float(metrics["attention_loss"]) > 0
    assert float(jnp.abs(grads[distill.PROJECTION]["kernel"]).sum()) > 0
    # The loss falls when only the projection learns: it is what maps the widths.
    step = jax.tree.map(lambda p, g: p - 0.5 * g, params[distill.PROJECTION],
                        grads[distill.PROJECTION])
    assert float(loss({**params, distill.PROJECTION: step})[1]["hidden_loss"]) < \
        float(metrics["hidden_loss"])


@pytest.mark.long
@pytest.mark.parametrize("shape", [
    dict(num_hidden_layers=3),
    dict(model_type="albert", embedding_size=8, num_hidden_layers=4, num_hidden_groups=2,
         inner_group_num=2),  # 8 applied layers, each group's two layers twice
], ids=["bert", "albert"])
def test_matched_states_are_the_model_s_hidden_states_and_attentions(shape):
    from bert_jax.models.encoder import BertModel
    config = preset("tiny", hidden_size=16, num_attention_heads=2, intermediate_size=32,
                    vocab_size=20, **shape)
    ids = jnp.array([[2, 5, 6, 7, 3, 0]], jnp.int32)
    model = heads.BertForSequenceClassification(config, 2, every_position=True)
    params = nn.unbox(model.init(jax.random.key(0), ids)["params"])
    _, captured = model.apply({"params": params}, ids, capture_intermediates=matching.is_captured,
                              mutable=["intermediates"])
    hidden, probs = matching.captured_states(captured["intermediates"], config)
    out = BertModel(config, output_hidden_states=True, output_attentions=True).apply(
        {"params": params["bert"]}, ids)
    assert len(hidden) == len(out.hidden_states) and len(probs) == len(out.attentions)
    jax.tree.map(np.testing.assert_array_equal, (list(hidden), list(probs)),
                 (list(out.hidden_states), list(out.attentions)))


def test_attention_of_different_head_counts_is_compared_as_head_means():
    student = [jnp.array(np.random.default_rng(0).dirichlet(np.ones(3), (1, 2, 3)))]
    teacher = [jnp.array(np.random.default_rng(1).dirichlet(np.ones(3), (1, 4, 3)))]
    (s,), (t,) = losses.comparable_attention(student, teacher)
    assert s.shape == t.shape == (1, 1, 3, 3)
    np.testing.assert_allclose(t[0, 0], np.mean(teacher[0][0], axis=0), rtol=1e-6)
    np.testing.assert_allclose(s.sum(-1), 1.0, rtol=1e-6)  # still distributions per query
    same = losses.comparable_attention(student, student)
    assert same[0][0].shape == (1, 2, 3, 3)  # equal head counts: head by head


@pytest.mark.slow
def test_distill_into_a_narrower_student_with_fewer_heads(teacher, tmp_path):
    teacher_dir, _ = teacher
    config = distill.distill_config(
        distill.load_finetuned_teacher(teacher_dir), "tiny",
        [f"model={NARROW_MODEL}", "hidden_weight=1.0", "attention_weight=1.0",
         "log_every_steps=1", "num_train_epochs=3", "learning_rate=1e-2"])
    results = distill.distill(config, distill.load_finetuned_teacher(teacher_dir),
                              str(tmp_path / "student"))
    saved = pretrained.load(str(tmp_path / "student" / "best"))
    assert saved.config.hidden_size == 16 and saved.config.num_attention_heads == 1
    assert distill.PROJECTION not in saved.params  # the projection is not the student's
    logged = [json.loads(line) for line in open(tmp_path / "student" / "metrics.jsonl")]
    hidden = [m["train/hidden_loss"] for m in logged if "train/hidden_loss" in m]
    assert len(hidden) == results["train_steps"] and hidden[-1] < hidden[0]
    assert all(m["train/attention_loss"] >= 0 for m in logged if "train/attention_loss" in m)


def save_plain_model(path, vocab):
    """A model directory with no task, its own vocabulary."""
    tokenizer = WordPieceTokenizer(vocab)
    config = preset("tiny", num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                    intermediate_size=64, vocab_size=len(vocab))
    from bert_jax.models.encoder import BertModel
    ids = jnp.ones((1, 4), jnp.int32)
    params = jax.device_get(BertModel(config).init(jax.random.key(0), ids)["params"])
    pretrained.save(path, config, {"bert": params}, tokenizer=tokenizer)
    return str(path)


@pytest.mark.long
@pytest.mark.parametrize("args, message", [
    (["--config.temperature=0"], "temperature must be a number > 0, got 0.0"),
    (["--config.alpha=1.5"], "alpha must be between 0 and 1, got 1.5"),
    (["--config.task=conll"], "task mismatch: the teacher was fine-tuned on 'csv', the "
                              "config asks for 'conll'"),
    (["--config.seeds=1,2"], "distill runs one setting"),
    (["--config.sweep.learning_rate=1e-3,2e-3"], "distill runs one setting"),
    (["--config.hidden_weight=-1"], "hidden_weight must be >= 0.0, got -1.0"),
    (["--config.student_layers=2"], "student_layers needs a student model directory"),
])
def test_bad_settings_get_one_line(teacher, tmp_path, capsys, args, message):
    teacher_dir, _ = teacher
    assert bert_jax_cli.main(["distill", "--teacher", teacher_dir, "--student", "tiny",
                              "--workdir", str(tmp_path / "w"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-jax distill: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.long
def test_bad_teacher_and_vocabulary_mismatch(teacher, tmp_path, capsys):
    teacher_dir, _ = teacher
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    plain = save_plain_model(tmp_path / "plain", vocab)
    other_task = tmp_path / "other_task"  # the teacher's model, said to be a tagger
    shutil.copytree(os.path.join(teacher_dir, "best"), other_task)
    meta = json.loads((other_task / "bert_jax.json").read_text())
    meta["task"]["name"] = "conll"
    (other_task / "bert_jax.json").write_text(json.dumps(meta))
    relabeled = write_tsv(tmp_path / "relabeled.tsv", [("fine", "good"), ("poor", "bad")])
    cases = [
        (["--teacher", plain, "--student", "tiny"], "is not a fine-tuned model"),
        (["--teacher", teacher_dir, "--student", str(other_task)],
         "task mismatch: the student {} was fine-tuned on 'conll', the teacher on 'csv'"
         .format(other_task)),
        (["--teacher", teacher_dir, "--student", "tiny", f"--config.train_file={relabeled}",
          f"--config.validation_file={relabeled}", f"--config.test_file={relabeled}"],
         "task mismatch: the student's training data gives labels ['bad', 'good'], the "
         "teacher was trained on ['neg', 'pos']"),
        (["--teacher", str(tmp_path / "none"), "--student", "tiny"], "no such directory"),
        (["--teacher", teacher_dir, "--student", plain], "vocabulary mismatch"),
    ]
    for args, message in cases:
        assert bert_jax_cli.main(["distill", *args, "--workdir", str(tmp_path / "w")]) == 2
        err = capsys.readouterr().err
        assert message in err, err
