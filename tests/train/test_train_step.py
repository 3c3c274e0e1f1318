"""The training core both loops share: model config, in-step accumulation, the update rule."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.models.config import ConfigError
from bert_jax.models.presets import preset
from bert_jax.train import train_step
from bert_jax.train.model_config import from_model_spec, run_bert_config
from bert_jax.train.optim import make_optimizer
from bert_jax.train.train_state import TrainState, make_key

PARAMS = {"w": jnp.array([0.5, -1.0, 2.0]), "b": jnp.array(0.3)}


def weighted_loss(params, batch):
    """Weighted mean squared error over rows: sum(w * err^2) / sum(w)."""
    err = batch["x"] @ params["w"] + params["b"] - batch["y"]
    return jnp.sum(batch["w"] * err ** 2) / jnp.sum(batch["w"])


def test_accumulated_micro_batches_give_the_whole_batchs_gradients():
    """Six rows of uneven weights in three micro-batches, each weighted by its share of
    the total weight (as pretraining weighs by masked tokens): the sum is the whole
    batch's gradient. Averaging the micro-batches' own means (what equal shares would
    give) differs here, so the test can fail."""
    rows = np.random.default_rng(0)
    batch = {"x": jnp.asarray(rows.normal(size=(6, 3)), jnp.float32),
             "y": jnp.asarray(rows.normal(size=6), jnp.float32),
             "w": jnp.array([1.0, 0.0, 3.0, 1.0, 2.0, 5.0])}
    total = jnp.sum(batch["w"])

    def share(index, micro):
        loss = lambda p: weighted_loss(p, micro) * jnp.sum(micro["w"]) / total
        value, grads = jax.value_and_grad(loss)(PARAMS)
        return grads, {"loss": value}

    grads, metrics = train_step.accumulate_gradients(share, batch, 3)
    loss, want = jax.value_and_grad(weighted_loss)(PARAMS, batch)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), grads, want)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5)

    micro = train_step.split_microbatches(batch, 3)
    np.testing.assert_array_equal(micro["w"][0], batch["w"][0::3])  # rows i, i + 3
    mean_of_means = jax.tree.map(lambda *g: sum(g) / 3, *[
        jax.grad(weighted_loss)(PARAMS, jax.tree.map(lambda x: x[i], micro)) for i in range(3)])
    assert not np.allclose(mean_of_means["w"], want["w"], rtol=1e-3)


def test_objective_of_micro_batches_divides_once_by_the_whole_batchs_weights():
    """Two (sum, weight) terms with uneven weights of their own, the loss a + 0.5 b of
    their means: three micro-batches give the loss, gradients and means of the whole
    batch; the mean of the micro-batches' own means would not."""
    rows = np.random.default_rng(1)
    batch = {"x": jnp.asarray(rows.normal(size=(6, 3)), jnp.float32),
             "y": jnp.asarray(rows.normal(size=6), jnp.float32),
             "w": jnp.array([1.0, 0.0, 3.0, 1.0, 2.0, 5.0]),
             "v": jnp.array([0.0, 2.0, 1.0, 1.0, 0.0, 4.0])}

    def terms(params, b, key):
        err = (b["x"] @ params["w"] + params["b"] - b["y"]) ** 2
        return {"a": (jnp.sum(b["w"] * err), jnp.sum(b["w"])),
                "b": (jnp.sum(b["v"] * jnp.abs(err)), jnp.sum(b["v"]))}

    coefficients = {"a": 1.0, "b": 0.5}
    key = jax.random.key(0)
    loss, grads, means = train_step.objective_and_grads(terms, coefficients, PARAMS, batch, key, 3)
    whole = lambda p: train_step.combine(terms(p, batch, key), coefficients)
    (want_loss, want_means), want = jax.value_and_grad(whole, has_aux=True)(PARAMS)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), grads, want)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), means, want_means)
    micro = train_step.split_microbatches(batch, 3)
    mean_of_means = np.mean([float(whole_of(terms, coefficients, jax.tree.map(
        lambda x: x[i], micro))) for i in range(3)])
    assert not np.isclose(mean_of_means, float(want_loss), rtol=1e-3)


def whole_of(terms, coefficients, batch):
    return train_step.combine(terms(PARAMS, batch, None), coefficients)[0]


def state_and_tx():
    tx, _ = make_optimizer(learning_rate=0.1, num_train_steps=10, warmup_steps=0)
    return TrainState.create(PARAMS, tx, make_key(0)), tx


@pytest.mark.parametrize("loss,bad_grad", [(1.0, jnp.inf), (jnp.nan, 1.0), (1.0, 1.0)])
def test_an_update_with_a_non_finite_loss_or_gradient_norm_is_skipped(loss, bad_grad):
    """The one rule of both loops: loss AND global gradient norm finite, else params and
    optimizer state stay and nonfinite_steps counts the skip (a finite loss with an
    infinite gradient is the case the fine-tuning step used to apply)."""
    state, tx = state_and_tx()
    grads = {"w": jnp.array([0.1, bad_grad, 0.2]), "b": jnp.array(0.1)}
    new, grad_norm, finite = train_step.apply_gradients(state, grads, jnp.asarray(loss), tx)
    ok = bool(np.isfinite(loss)) and bool(np.isfinite(bad_grad))
    assert bool(finite) == ok and int(new.step) == 1
    assert int(new.nonfinite_steps) == (0 if ok else 1)
    assert np.isfinite(float(grad_norm)) == bool(np.isfinite(bad_grad))
    moved = not np.allclose(new.params["w"], state.params["w"])
    assert moved == ok
    counts = {int(count) for _, count in
              optax.tree_utils.tree_get_all_with_path(new.opt_state, "count")}
    assert counts == {1 if ok else 0}


def test_a_model_spec_is_a_preset_or_a_dict():
    assert from_model_spec("tiny", 100) == preset("tiny", vocab_size=100)
    fields = {"preset": "tiny", "vocab_size": 50, "num_hidden_layers": 1}
    assert from_model_spec(fields, 100) == preset("tiny", vocab_size=50, num_hidden_layers=1)
    assert from_model_spec({"num_hidden_layers": 2}) == preset("bert-base", num_hidden_layers=2)
    assert from_model_spec(fields, 100, hidden_size=64).hidden_size == 64
    with pytest.raises(ConfigError, match="unknown model preset"):
        from_model_spec("tinyy")


def test_a_runs_numerics_and_dropout_replace_the_models_where_it_sets_them():
    saved = preset("tiny", dtype="bfloat16", remat_policy="full", scan_layers=True,
                   hidden_dropout_prob=0.2)
    pretraining = {"compute_dtype": "fp8", "remat_policy": "none", "scan_layers": False,
                   "attention_impl": "einsum", "attention_probs_dropout_prob": None}
    assert run_bert_config(pretraining, "tiny", 100) == preset(
        "tiny", vocab_size=100, dtype="bfloat16", fp8=True)
    finetuning = {"compute_dtype": "", "remat_policy": "", "attention_impl": "einsum",
                  "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    assert run_bert_config(finetuning, saved) == saved.replace(
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    teacher = run_bert_config(pretraining, saved, remat_policy="none",
                              attention_probs_dropout_prob=0.0)
    assert (teacher.dtype, teacher.fp8, teacher.scan_layers, teacher.remat_policy,
            teacher.hidden_dropout_prob) == ("bfloat16", True, False, "none", 0.2)
    with pytest.raises(ConfigError, match="attention_impl='fused' has no attention-prob"):
        run_bert_config({**finetuning, "attention_impl": "fused",
                         "attention_probs_dropout_prob": 0.1}, saved)
