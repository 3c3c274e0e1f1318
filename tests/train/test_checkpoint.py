"""Checkpoints: restore onto other device counts, fallback from a corrupt latest,
parameter matching, and workdirs as model directories."""

import logging
import os

import jax
import numpy as np
import pytest

from bert_jax.errors import CheckpointError
from bert_jax.host import folders
from bert_jax.models import layer_layout
from bert_jax.tokenization import load_tokenizer
from bert_jax.train import checkpoint
from bert_jax.weights import pretrained

from helpers.states import CONFIG, plan_on, restore, state_on


def assert_trees_equal(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)),
                 jax.device_get(a), jax.device_get(b))


@pytest.mark.long
def test_saved_on_8_devices_restores_onto_1_and_4(tmp_path):
    state, _ = state_on(jax.devices(), {"fsdp": 4, "tensor": 2})
    with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
        ckpt.save(7, state, {"pipeline": {"epoch": 0, "position": 56}})
        ckpt.wait()
    for count in (1, 4):
        target = plan_on(jax.devices()[:count]).abstract
        restored, meta, step = restore(tmp_path, target)
        assert step == 7 and meta["pipeline"] == {"epoch": 0, "position": 56}
        assert len(restored.params["mlm"]["output_bias"].sharding.device_set) == count
        assert_trees_equal(restored, state)


def test_corrupt_latest_falls_back_to_the_previous_with_a_warning(tmp_path, caplog):
    state, plan = state_on(jax.devices()[:2])
    with checkpoint.Checkpointer(str(tmp_path), keep=3) as ckpt:
        for step in (1, 2):
            ckpt.save(step, state.replace(step=state.step + step), {"pipeline": None})
        ckpt.wait()
    state_dir = tmp_path / "checkpoints" / "2" / "state"
    for root, _, files in os.walk(state_dir):  # half-written: array data truncated
        for name in files:
            if "manifest" in name or root.endswith(os.sep + "d"):
                open(os.path.join(root, name), "wb").close()
    target = plan.abstract
    with caplog.at_level(logging.WARNING):
        restored, _, step = restore(tmp_path, target)
    assert step == 1 and int(restored.step) == 1
    assert any(str(tmp_path / "checkpoints" / "2") in r.getMessage() for r in caplog.records)
    assert [p.name.split("-")[0] for p in (tmp_path / checkpoint.CORRUPT_DIR).iterdir()] == ["2"]


def test_match_params_names_missing_extra_and_misshaped():
    target = {"a": np.zeros(3), "b": {"c": np.zeros((2, 2))}}
    with pytest.raises(CheckpointError) as e:
        pretrained.match_params({"a": np.zeros(4), "x": np.zeros(1)}, target)
    message = str(e.value)
    assert "a (4,) vs model (3,)" in message and "b/c" in message and "x" in message
    loaded = pretrained.match_params({"a": np.ones(3)}, target, partial=True)
    assert loaded["a"].sum() == 3 and loaded["b"]["c"].shape == (2, 2)


def test_init_params_drops_only_unused_heads_and_stacks_layers_as_the_target():
    encoder = {"encoder": {"layer_0": {"w": np.ones(2)}, "layer_1": {"w": np.zeros(2)}},
               "pooler": {"b": np.ones(1)}}
    loaded = {"bert": encoder, "nsp": {"k": np.ones(3)}}
    scanned = {"bert": {"encoder": {"layers": {"w": jax.ShapeDtypeStruct((2, 2), np.float32)}},
                        "pooler": {"b": jax.ShapeDtypeStruct((1,), np.float32)}}}
    params = pretrained.init_params(scanned, loaded, drop=("nsp",))
    assert set(params) == {"bert"} and isinstance(params["bert"]["pooler"]["b"], jax.Array)
    np.testing.assert_array_equal(params["bert"]["encoder"]["layers"]["w"], [[1, 1], [0, 0]])
    with pytest.raises(CheckpointError, match="unexpected: nsp/k"):
        pretrained.init_params(scanned, loaded)
    with_nsp = {**scanned, "nsp": {"k": jax.ShapeDtypeStruct((3,), np.float32)}}
    assert set(pretrained.init_params(with_nsp, loaded, drop=("nsp",))) == {"bert", "nsp"}
    # An encoder's target (a fresh task head's run, embed) takes the encoder alone.
    unrolled = {"encoder": {f"layer_{i}": {"w": jax.ShapeDtypeStruct((2,), np.float32)}
                            for i in range(2)}}
    params = pretrained.init_params(unrolled, layer_layout.to_scanned(encoder), drop=("pooler",))
    np.testing.assert_array_equal(params["encoder"]["layer_1"]["w"], [0, 0])


def test_workdir_loads_as_a_pretrained_model(tmp_path):
    state, _ = state_on(jax.devices()[:1])
    vocab = tmp_path.parent / f"{tmp_path.name}-vocab.txt"  # as many tokens as embeddings
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                               + [f"w{i}" for i in range(CONFIG.vocab_size - 5)]) + "\n")
    pretrained.write_model_files(str(tmp_path / folders.PRETRAINING_WORKDIR.model), CONFIG,
                                 tokenizer=load_tokenizer(str(vocab)))
    with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
        ckpt.save(3, state, {"pipeline": None})
        ckpt.wait()
    loaded = pretrained.load(str(tmp_path))
    assert loaded.config == CONFIG.replace(scan_layers=False)
    assert isinstance(loaded.params["mlm"]["output_bias"], np.ndarray)
    assert_trees_equal(loaded.params, state.params)
    assert os.path.exists(os.path.join(loaded.tokenizer_dir, "vocab.txt"))
