"""The two layouts of a parameter tree's encoder: unrolled `layer_i` and scanned `layers`.

Unrolled for model directories and HF conversion, scanned with `scan_layers=True`. Below
`bert_jax.weights.pretrained` (which re-exports these) so the HF conversion can use them without
reading model directories."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def to_scanned(params: dict[str, Any]) -> dict[str, Any]:
    """Stacks `[bert/]encoder/layer_i` into `[bert/]encoder/layers`.

    A no-op if already scanned, and for ALBERT, whose shared `group_g` have one layout either way.
    Accepts the params of a task model or of a bare `BertModel`."""
    encoder = encoder_of(params)
    if "layers" in encoder or "layer_0" not in encoder:
        return params
    layers = [encoder[f"layer_{i}"] for i in range(len(encoder))]
    stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *layers)
    return _with_encoder(params, {"layers": stacked})


def to_unscanned(params: dict[str, Any]) -> dict[str, Any]:
    """Splits `[bert/]encoder/layers` into `[bert/]encoder/layer_i` (no-op if unrolled)."""
    encoder = encoder_of(params)
    if "layers" not in encoder:
        return params
    stacked = encoder["layers"]
    count = jax.tree.leaves(stacked)[0].shape[0]
    return _with_encoder(params, {
        f"layer_{i}": jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(count)})


def match_layout(params: dict[str, Any], scan_layers: bool) -> dict[str, Any]:
    return to_scanned(params) if scan_layers else to_unscanned(params)


def encoder_of(params):
    """The `encoder` subtree of a task model's or a bare `BertModel`'s params."""
    return params["bert"]["encoder"] if "bert" in params else params["encoder"]


def _with_encoder(params, encoder):
    if "bert" in params:
        return {**params, "bert": {**params["bert"], "encoder": encoder}}
    return {**params, "encoder": encoder}
