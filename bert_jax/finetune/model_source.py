"""The encoder a fine-tuning run starts from (`resolve_model`), with its numerics and dropout.

A model directory, a pretraining workdir or a Hub model (`config.init_from`), checked against
`config.model` and the tokenizer, or a random `config.model`; with the run's numerics and
dropout."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax

from bert_jax.models.config import BertConfig, ConfigError
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.train.model_config import from_model_spec, run_bert_config
from bert_jax.weights import pretrained

log = logging.getLogger("bert_jax.finetune")


@dataclasses.dataclass
class ModelSource:
    """The encoder to start from: its config, tokenizer and (numpy) parameters.

    Read once (`resolve_model`) and placed into each run's fresh model (`init_params`)."""

    config: BertConfig
    tokenizer: Any
    encoder_params: dict | None
    origin: str
    task: dict | None = None  # the fine-tuning task the source model was saved with

    def init_params(self, params: dict, shardings: dict) -> dict:
        """A fresh task model's `params` (placed with `shardings`) with this encoder's weights.

        This encoder's weights take the place of the random encoder (`pretrained.init_params`; a
        tagger's or span model has no pooler, so the source's is dropped, and a source without one,
        such as a masked-LM checkpoint, leaves the pooler fresh, as transformers does); as they are
        for a random encoder."""
        if self.encoder_params is None:
            return params
        loaded = self.encoder_params
        if "pooler" in params["bert"] and "pooler" not in loaded:
            log.warning("%s has no pooler: the classifier's pooler starts from random "
                        "weights (or set pooling=mean)", self.origin)
            loaded = {**loaded, "pooler": jax.device_get(params["bert"]["pooler"])}
        encoder = pretrained.init_params(params["bert"], loaded, shardings["bert"],
                                         drop=("pooler",), source=self.origin)
        return {**params, "bert": encoder}


def resolve_model(config) -> ModelSource:
    """The encoder of `config.init_from`, or a randomly initialised `config.model`.

    `config.init_from`'s is checked against `config.model` when both are set; the random one has
    `config.tokenizer`. With the run's numerics and dropout (`run_bert_config`)."""
    if config.init_from:
        pre = pretrained.load(config.init_from)  # resolved here, once per run
        tokenizer = load_tokenizer(config.tokenizer or pre.tokenizer_dir)
        if config.model:
            wanted = from_model_spec(config.model, pre.config.vocab_size)
            for field in ("vocab_size", "hidden_size", "num_hidden_layers",
                          "num_attention_heads", "intermediate_size", "model_type",
                          "embedding_size"):
                have, want = getattr(pre.config, field), getattr(wanted, field)
                if have != want:
                    raise ConfigError(
                        f"checkpoint {config.init_from} has {field}={have} but the config asks "
                        f"for {field}={want} (model={config.model!r}); drop --config.model "
                        "to use the checkpoint's architecture")
        if tokenizer.vocab_size != pre.config.vocab_size:
            raise ConfigError(f"the tokenizer has {tokenizer.vocab_size} tokens but checkpoint "
                              f"{config.init_from} has vocab_size={pre.config.vocab_size}")
        bert_params = pre.params.get("bert", pre.params)
        return ModelSource(run_bert_config(config, pre.config), tokenizer, bert_params,
                           config.init_from, pre.task)
    if not config.model:
        raise ConfigError("nothing to fine-tune: pass --init_from CHECKPOINT (a model directory or "
                          "a pretraining workdir) or --config.model=PRESET for a random encoder")
    tokenizer = load_tokenizer(config.tokenizer or DEFAULT_VOCAB)
    spec = config.model if isinstance(config.model, str) else dict(config.model)
    return ModelSource(run_bert_config(config, config.model, tokenizer.vocab_size), tokenizer,
                       None, f"random {spec}")
