"""Where a pretraining run starts: init_from, the run's tokenizer and a fresh state.

What `config.init_from` names (resolved once), the run's tokenizer (config.tokenizer, else
init_from's own, else the bundled vocabulary) and a fresh state, from random weights or
init_from's."""

from __future__ import annotations

import logging
from typing import Any

import jax
import ml_collections

from bert_jax.errors import UserError
from bert_jax.models import matching
from bert_jax.pretrain.setup import Setup
from bert_jax.train import checkpoint, config_loader, run_config
from bert_jax.train.train_state import TrainState
from bert_jax.weights import pretrained

log = logging.getLogger(__name__)


def as_resumed(config: ml_collections.ConfigDict, workdir: str) -> ml_collections.ConfigDict:
    """`config`, with the saved run's value of each key whose default changed since.

    A run made before `input_pipeline` existed resumes through tf.data, as it began."""
    saved = checkpoint.latest_saved_config(workdir)
    if saved is None:
        return config
    defaults = run_config.base_config(run_config.PRETRAIN)
    kept = {key: saved[key] for key in run_config.FOLLOW_THE_SAVED_RUN
            if key in saved and config[key] == defaults[key] != saved[key]}
    if not kept:
        return config
    config = config_loader.build_config("pretrain", config.to_dict(), changes=kept)
    log.warning("resuming %s as it was run: %s", workdir,
                ", ".join(f"{key} {value!r}" for key, value in kept.items()))
    return config


def init_state(config, run_setup: Setup, writer,
               init_from: pretrained.ModelRef | None) -> TrainState:
    """A fresh state: random weights drawn from config.seed, or `init_from`'s when set.

    The weights of `init_from` (config.init_from, resolved) take their place when set (weights only:
    a new optimizer and schedule)."""
    state = run_setup.state_plan.create(config.seed)
    if init_from is None:
        return state
    loaded = init_from.load()
    if not config.next_sentence_prediction and "nsp" in loaded.params:
        writer.message(f"MLM-only run: the NSP head of {config.init_from} is not used")
    plan, params = run_setup.state_plan, loaded.params
    if "pooler" not in params["bert"]:  # an MLM-only model's (RoBERTa's, DistilBERT's)
        fresh = jax.device_get(state.params["bert"]["pooler"])
        params = {**params, "bert": {**params["bert"], "pooler": fresh}}
        writer.message(f"{config.init_from} has no pooler: a fresh one is kept")
    if matching.PROJECTION in state.params:  # this run's distillation trains it afresh
        params = {**params, matching.PROJECTION: jax.device_get(
            state.params[matching.PROJECTION])}
    params = pretrained.init_params(
        jax.device_get(state.params) if config.partial_restore else plan.abstract.params,
        params, plan.shardings.params, drop=("nsp",), partial=config.partial_restore,
        source=config.init_from,
        missing_hint=" (set partial_restore to keep fresh values for missing ones)")
    writer.message(f"initialised weights from {config.init_from}")
    return state.replace(params=params)


def open_init_from(config) -> pretrained.ModelRef | None:
    """config.init_from resolved (None when unset).

    A fine-tuned model, which lacks the pretraining heads, only with partial_restore."""
    if not config.init_from:
        return None
    init_from = pretrained.open_model(config.init_from)
    if init_from.task and not config.partial_restore:
        raise UserError(f"{config.init_from} is a model fine-tuned on "
                        f"{init_from.task.get('name')!r}, without the pretraining heads: "
                        "pretrain from a pretrained model, or take its encoder alone with "
                        "--config.partial_restore=true")
    return init_from


def run_tokenizer(config: ml_collections.ConfigDict,
                  init_from: pretrained.ModelRef | None) -> tuple[str, Any]:
    """(path, tokenizer) of a run: config.tokenizer, else `init_from`'s own, else the bundled one.

    `init_from` is config.init_from, resolved: continued pretraining keeps the model's vocabulary,
    as fine-tuning does. An explicit tokenizer must be init_from's vocabulary: other token ids would
    silently mean other words to the loaded embeddings."""
    from bert_jax.tokenization import DEFAULT_VOCAB, has_tokenizer, load_tokenizer
    source = init_from and init_from.tokenizer_dir
    # A model saved without its tokenizer (`pretrained.save` allows it) has none to keep.
    model_tokenizer = load_tokenizer(source) if source and has_tokenizer(source) else None
    if not config.tokenizer:
        return ((source, model_tokenizer) if model_tokenizer
                else (DEFAULT_VOCAB, load_tokenizer(DEFAULT_VOCAB)))
    path, tokenizer = config.tokenizer, load_tokenizer(config.tokenizer)
    if model_tokenizer and model_tokenizer.fingerprint() != tokenizer.fingerprint():
        raise UserError(f"tokenizer {config.tokenizer} is not the vocabulary of init_from "
                        f"{config.init_from} ({source}): drop --config.tokenizer to use the "
                        "model's")
    return path, tokenizer
