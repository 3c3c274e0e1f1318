"""Staged fine-tuning: parameters frozen by path pattern get no update and hold no
optimizer state while frozen, then train with the rest (`optim.freeze`, the trainer's
`freeze`, `freeze_steps`, `freeze_epochs`)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.finetune import job
from bert_jax.train import optim
from bert_jax.train.train_state import make_key
from bert_jax.weights import pretrained

from helpers.finetune import NEGATIVE, POSITIVE, micro_config, shared_compilation_cache, write_tsv

PARAMS = {"bert": {"embeddings": {"word": jnp.ones((4, 3))},
                   "encoder": {"kernel": jnp.ones((3, 3)), "bias": jnp.zeros(3)}},
          "classifier": {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros(2)}}


def test_mask_by_pattern_and_unknown_pattern_named():
    mask = optim.frozen_mask(PARAMS, "bert/*")
    assert jax.tree.leaves(mask["bert"]) == [True, True, True]
    assert jax.tree.leaves(mask["classifier"]) == [False, False]
    mask = optim.frozen_mask(PARAMS, "bert/embeddings/*, classifier/bias")
    assert mask["bert"]["embeddings"]["word"] and mask["classifier"]["bias"]
    assert not mask["bert"]["encoder"]["kernel"]
    with pytest.raises(UserError, match="'encoder/\\*' matches no parameter; parameters start "
                                        "with: bert/embeddings, bert/encoder, classifier/bias"):
        optim.frozen_mask(PARAMS, "encoder/*")


def test_frozen_params_get_no_update_and_no_state_then_keep_trained_state():
    tx, _ = optim.make_optimizer(learning_rate=0.1, num_train_steps=10, warmup_steps=0,
                                 injected=True)
    frozen_tx = optim.freeze(tx, optim.frozen_mask(PARAMS, "bert/*"))
    state = frozen_tx.init(PARAMS)
    state_elements = sum(x.size for x in jax.tree.leaves(state))
    full_elements = sum(x.size for x in jax.tree.leaves(tx.init(PARAMS)))
    # Adam keeps two moments per trained parameter: none for the 24 frozen elements.
    assert full_elements - state_elements == 2 * 24
    grads = jax.tree.map(lambda p: jnp.full_like(p, 0.5), PARAMS)
    for _ in range(3):
        updates, state = frozen_tx.update(grads, state, PARAMS)
        assert all(float(jnp.abs(u).sum()) == 0 for u in jax.tree.leaves(updates["bert"]))
        assert all(float(jnp.abs(u).sum()) > 0 for u in jax.tree.leaves(updates["classifier"]))
    full = optim.unfreeze_state(state, tx.init(PARAMS))
    assert jax.tree.structure(full) == jax.tree.structure(tx.init(PARAMS))
    adam = full.inner_state[1][0]
    trained = state.inner_states["trained"].inner_state.inner_state[1][0]
    np.testing.assert_array_equal(adam.mu["classifier"]["kernel"],
                                  trained.mu["classifier"]["kernel"])
    assert float(jnp.abs(adam.mu["classifier"]["kernel"]).sum()) > 0
    assert float(jnp.abs(adam.mu["bert"]["encoder"]["kernel"]).sum()) == 0  # fresh
    assert int(full.count) == 3  # the schedule goes on where it was
    updates, _ = tx.update(grads, full, PARAMS)
    assert float(jnp.abs(updates["bert"]["encoder"]["kernel"]).sum()) > 0


@pytest.fixture(autouse=True)
def compile_cache(tmp_path):
    """Compiled programs shared with the other fine-tuning tests (same micro shapes)."""
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        yield


@pytest.fixture
def files(tmp_path):
    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    return [f"train_file={write_tsv(tmp_path / 'train.tsv', rows * 3)}",
            f"validation_file={write_tsv(tmp_path / 'dev.tsv', rows)}",
            "text_column=sentence", "label_column=sentiment", "num_train_epochs=2",
            "learning_rate=1e-2", "keep_checkpoint=last"]


def saved(workdir):
    return pretrained.load(f"{workdir}/best").params


@pytest.mark.long
def test_frozen_encoder_then_unfrozen(tmp_path, files):
    whole = micro_config("csv", *files, "freeze=bert/*")
    session = job.Finetuning(whole)
    results = session.run(whole, str(tmp_path / "whole"))
    assert results["frozen_steps"] == results["train_steps"] == 8
    model = session.prepared(42).model
    dummy = jnp.ones((1, 8), jnp.int32)
    key = jax.random.fold_in(make_key(42), 0)
    initial = jax.device_get(nn.unbox(
        model.init({"params": key, "dropout": key}, dummy, dummy, dummy)["params"]))
    frozen = saved(tmp_path / "whole")
    jax.tree.map(np.testing.assert_array_equal, frozen["bert"], initial["bert"])
    assert not np.array_equal(frozen["classifier"]["kernel"], initial["classifier"]["kernel"])

    staged = micro_config("csv", *files, "freeze=bert/*", "freeze_epochs=1")
    assert session.run(staged, str(tmp_path / "staged"))["frozen_steps"] == 4
    plain = micro_config("csv", *files)
    session.run(plain, str(tmp_path / "plain"))
    for name in ("staged", "plain"):
        kernel = saved(tmp_path / name)["bert"]["embeddings"]["word_embeddings"]["embedding"]
        assert not np.array_equal(kernel, initial["bert"]["embeddings"]["word_embeddings"]
                                  ["embedding"])
    assert not np.array_equal(saved(tmp_path / "staged")["classifier"]["kernel"],
                              saved(tmp_path / "plain")["classifier"]["kernel"])


@pytest.mark.parametrize("overrides,message", [
    (("freeze=bert/*", "freeze_steps=2", "freeze_epochs=1"), "freeze_steps or freeze_epochs"),
    (("freeze=bert/*", "freeze_steps=-1"), "freeze_steps must be an integer >= 0"),
    (("freeze=encoder/*",), "'encoder/\\*' matches no parameter"),
])
def test_bad_freeze_settings(tmp_path, files, overrides, message):
    with pytest.raises(UserError, match=message):
        job.finetune(micro_config("csv", *files, *overrides), str(tmp_path / "run"))


@pytest.mark.long
def test_a_source_without_a_pooler_leaves_the_classifier_s_pooler_fresh():
    # A masked-LM checkpoint (transformers' *ForMaskedLM) has no pooler: fine-tuning a
    # pooled classifier from it keeps the fresh pooler and loads everything else.
    import numpy as np

    from bert_jax.finetune.model_source import ModelSource
    from bert_jax.models.heads import BertForSequenceClassification
    from bert_jax.models.presets import preset
    config = preset("tiny").replace(vocab_size=64)
    model = BertForSequenceClassification(config, num_labels=2)
    ids = np.ones((1, 8), np.int32)
    fresh = nn.unbox(model.init(jax.random.key(0), ids)["params"])
    source_params = nn.unbox(model.init(jax.random.key(1), ids)["params"])["bert"]
    del source_params["pooler"]
    source = ModelSource(config, None, jax.device_get(source_params), "an MLM checkpoint")
    shardings = jax.tree.map(lambda x: x.sharding, fresh)
    params = source.init_params(fresh, shardings)
    np.testing.assert_array_equal(params["bert"]["pooler"]["kernel"],
                                  fresh["bert"]["pooler"]["kernel"])
    np.testing.assert_array_equal(params["bert"]["embeddings"]["word_embeddings"]["embedding"],
                                  source_params["embeddings"]["word_embeddings"]["embedding"])
