"""bert_jax's encoders as Flax NNX modules, for code written with `flax.nnx`.

The linen modules stay the implementation: `nnx_module` wraps one in `flax.nnx.bridge.ToNNX`
and puts the pretrained weights into it, so the result is an ordinary `nnx.Module`
(`nnx.state`, `nnx.jit`, `nnx.grad`, `nnx.Optimizer` all work on it) that computes exactly
what `BertModel.apply` / `BertForSequenceClassification.apply` compute on the same
parameters. Calling it is calling the linen module: `model(input_ids, input_mask,
segment_ids, deterministic=...)`.

The linen parameters carry logical axis names (`nn.with_logical_partitioning`). NNX would
shard each variable by them as it is created, which needs a mesh and axis rules; `nnx_module`
turns that eager sharding off instead, so the model lands on the default device and each
`nnx.Param` keeps its names as metadata: `nnx.get_partition_spec(nnx.state(model))` gives
them, to be mapped onto a mesh by `bert_jax.train.axis_rules`' rules when sharding.
"""

from __future__ import annotations

import os

import flax.linen as nn
import jax
import numpy as np
from flax import nnx
from flax.nnx import bridge

from bert_jax.errors import UserError, check_ids, check_positive
from bert_jax.models.config import BertConfig, check_choice, check_inputs_fit
from bert_jax.models.encoder import BertModel
from bert_jax.models.heads import CLASSIFIER_POOLINGS, BertForSequenceClassification
from bert_jax.weights import pretrained

# The shape of the example batch that creates the variables: the parameters do not depend
# on it.
_EXAMPLE_SHAPE = (1, 8)


def _head(model: pretrained.Pretrained, num_labels: int) -> dict | None:
    """The saved classifier's weights when they fit `model`'s head.

    They fit when it is a sequence classifier (or regressor) with `num_labels` outputs: a fine-tuned
    model keeps its head."""
    head = model.head
    if not head.entry.classifies_sequences or head.num_labels != num_labels:
        return None
    return model.params.get(head.entry.param)


class BertNNX(bridge.ToNNX):
    """`bridge.ToNNX` around a bert_jax model, checking each call's inputs first.

    Every call: `input_ids` must be [batch, length] with length within the model's positions.
    Host inputs (numpy arrays, lists) also have their ids checked against the vocabulary and the
    token types; device arrays and the tracers of `nnx.jit` are not read, so a jitted step costs
    nothing more."""

    def __call__(self, input_ids, input_mask=None, segment_ids=None, *args, **kwargs):
        if kwargs.get("method") is None:
            positions = bool(args) or kwargs.get("position_ids") is not None  # BertModel's 4th
            check_batch(self.to_nnx__module.config, self.to_nnx__source, input_ids,
                        segment_ids, positions)
        return super().__call__(input_ids, input_mask, segment_ids, *args, **kwargs)


def check_batch(config: BertConfig, source: str, input_ids, segment_ids=None,
                has_positions: bool = False) -> None:
    """Raises UserError for a batch that would index past `config`'s tables (NaN, no error).

    Its shape (rows no longer than the positions unless `has_positions`), and for host arrays
    the ids (`errors.check_ids`). `source` names the model."""
    shape = np.shape(input_ids)
    if len(shape) != 2:
        raise UserError(f"input_ids must be [batch, length] token ids, got shape {shape}")
    if not has_positions:
        try:
            check_inputs_fit(config, source, max_seq_length=shape[1])
        except UserError as e:
            raise UserError(f"input_ids has rows of {shape[1]} tokens: {e}") from None
    if isinstance(input_ids, (np.ndarray, list, tuple)):
        check_ids("input_ids", input_ids, config.vocab_size, source)
    if isinstance(segment_ids, (np.ndarray, list, tuple)) and config.type_vocab_size:
        check_ids("segment_ids", segment_ids, config.type_vocab_size, source,
                  "type_vocab_size")


def nnx_module(path: str | os.PathLike | pretrained.ModelRef | pretrained.Pretrained, *,
               num_labels: int | None = None, pooling: str | None = None,
               seed: int = 0) -> bridge.ToNNX:
    """The model at `path` as an NNX module holding its weights.

    `path`: anything `pretrained.open_model` takes (a model directory, a pretraining or fine-tuning
    workdir, `hf:ORG/NAME`), or an already loaded `Pretrained`, whose `config` may have been
    changed.

    num_labels None: the encoder (`BertModel`, with the pooler if the model has one); called
    on ids [B, L] it returns a `BertOutput` (`sequence_output` [B, L, H], `pooled_output`
    [B, H] or None). num_labels N: a sequence classifier (`BertForSequenceClassification`,
    logits [B, N]) on the pretrained encoder; its head (and a pooler the model lacks) starts
    from random weights drawn from `seed`, unless the model is a fine-tuned classifier
    with N labels, whose head is kept. `pooling`: "pooler" or "mean" (default: what the
    model was fine-tuned with, else "pooler"). Dropout (`deterministic=False`) draws from
    the module's `dropout` stream, seeded by `seed`.

    A call checks its inputs (`BertNNX`); a bad count, pooling or seed raises UserError.
    """
    if num_labels is not None:
        check_positive("num_labels", num_labels)
    if pooling is not None:
        check_choice("pooling", pooling, CLASSIFIER_POOLINGS)
    if pooling is not None and num_labels is None:
        raise UserError(f"pooling={pooling!r} is for a classifier: give num_labels too "
                        "(the encoder returns every token's states and the pooled [CLS])")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UserError(f"seed must be an integer, got {seed!r}")
    model = path if isinstance(path, pretrained.Pretrained) else pretrained.load(path)
    encoder = model.params.get("bert", model.params)
    if num_labels is None:
        linen = BertModel(model.config, add_pooling_layer="pooler" in encoder)
    else:
        linen = BertForSequenceClassification(
            model.config, num_labels, pooling or model.head.pooling or "pooler")
    ids = np.zeros(_EXAMPLE_SHAPE, np.int32)
    with nnx.use_eager_sharding(False):
        # The variables' shapes and names without computing them: the values come next.
        abstract = nnx.eval_shape(
            lambda: bridge.ToNNX(linen, rngs=nnx.Rngs(0)).lazy_init(ids, np.ones_like(ids)))
        state = nnx.state(abstract, nnx.Param)
        nnx.replace_by_pure_dict(state, _values(model, linen, state.to_pure_dict(), seed))
        module = BertNNX(linen, rngs=nnx.Rngs(dropout=seed))
        # ToNNX hands the linen module every attribute but its own `to_nnx__` ones.
        module.to_nnx__source = str(model.tokenizer_dir)
        nnx.update(module, state)
    return module


def _values(model: pretrained.Pretrained, linen, target: dict, seed: int) -> dict:
    """The parameters of `linen` (shaped as `target`, a tree of ShapeDtypeStructs).

    The loaded encoder's, and for a classifier a random or the saved head."""
    encoder = model.params.get("bert", model.params)
    source = str(model.tokenizer_dir)
    if not isinstance(linen, BertForSequenceClassification):
        return pretrained.init_params(target, encoder, source=source)
    fresh = _random_head(linen, seed)
    if "pooler" in target["bert"] and "pooler" not in encoder:
        encoder = {**encoder, "pooler": fresh["pooler"]}
    head = _head(model, linen.num_labels)
    return {"bert": pretrained.init_params(target["bert"], encoder, drop=("pooler",),
                                           source=source),
            "classifier": fresh["classifier"] if head is None else jax.device_put(head)}


def _random_head(linen: BertForSequenceClassification, seed: int) -> dict:
    """{"classifier", "pooler" (None with mean pooling)} drawn as `linen.init` draws them.

    Under jit the rest of the initialisation is dead code: XLA compiles only the head's."""
    ids = np.zeros(_EXAMPLE_SHAPE, np.int32)

    def head(key):
        params = nn.unbox(linen.init(key, ids, np.ones_like(ids)))["params"]
        return {"classifier": params["classifier"], "pooler": params["bert"].get("pooler")}

    return jax.jit(head)(jax.random.key(seed))
