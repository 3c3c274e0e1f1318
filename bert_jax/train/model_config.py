"""The BertConfig a job runs.

A run config's `model` (a preset name or a dict of fields) and its numerics and dropout
(`compute_dtype`, `remat_policy`, `attention_impl`, `scan_layers`, the dropout probabilities)
applied to a model config."""

from __future__ import annotations

from typing import Any

from bert_jax.models.config import DTYPES, BertConfig, check_choice
from bert_jax.models.presets import preset

# A run's `compute_dtype`: a dtype, or "fp8" (bfloat16 with FP8 encoder matmuls).
COMPUTE_DTYPES = (*DTYPES, "fp8")


def compute_fields(compute_dtype: str) -> dict[str, Any]:
    """A run's `compute_dtype` as BertConfig fields.

    "fp8" is bfloat16 compute with the encoder's matmuls in float8 (`BertConfig.fp8`)."""
    check_choice("compute_dtype", compute_dtype, COMPUTE_DTYPES)
    if compute_dtype == "fp8":
        return {"dtype": "bfloat16", "fp8": True}
    return {"dtype": compute_dtype, "fp8": False}


# The run-config keys that set BertConfig fields of the same name where a run sets them.
_RUN_FIELDS = ("remat_policy", "attention_impl", "scan_layers")
_RUN_DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


def run_bert_config(run: Any, base: BertConfig | str | Any, vocab_size: int | None = None,
                    **fixed) -> BertConfig:
    """The BertConfig a job runs, the one place where a run's numerics and dropout meet the model.

    `base` (a checkpoint's BertConfig, or a spec for `from_model_spec` with the tokenizer's
    `vocab_size`) with each of the run's compute_dtype (`compute_fields`), remat_policy,
    attention_impl, scan_layers and dropout probabilities that `run`
    (a job's config, read with `.get`) sets: absent, None or '' keep the base's. Parameters are
    float32 (training updates them). `fixed`: fields that win over the run's
    (a teacher's eval mode). Raises ConfigError when the result cannot train."""
    changes = {"param_dtype": "float32"}
    if run.get("compute_dtype"):
        changes.update(compute_fields(run.get("compute_dtype")))
    for key in _RUN_FIELDS + _RUN_DROPOUTS:
        value = run.get(key)
        if value is not None and value != "":
            changes[key] = float(value) if key in _RUN_DROPOUTS else value
    changes.update(fixed)
    config = (base.replace(**changes) if isinstance(base, BertConfig)
              else from_model_spec(base, vocab_size, **changes))
    config.check_trainable()
    return config


def from_model_spec(spec: str | Any, vocab_size: int | None = None,
                    **overrides) -> BertConfig:
    """A preset name, or a dict of BertConfig fields with an optional 'preset' (default bert-base).

    `vocab_size` (the tokenizer's) applies unless the dict sets one; `overrides` win over both."""
    fields = {"preset": spec} if isinstance(spec, str) else dict(spec)
    name = fields.pop("preset", "bert-base")
    if vocab_size is not None:
        fields.setdefault("vocab_size", vocab_size)
    return preset(name, **{**fields, **overrides})
