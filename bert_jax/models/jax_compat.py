"""The private jax APIs that bert_jax uses, each in one place.

jax promises nothing for `jax._src` or underscored names, and a release may move them.
bert_jax supports jax 0.7.2 (Colab's) to the newest, pinned at 0.10.2: each entry says
which of those versions need it and what public API replaces it where jax has one. When
an upgrade moves a name, fix it here. Callers that can run without the name (an export
tweak, a compile-time check) catch ImportError and AttributeError and keep jax's default.
No other bert_jax module imports `jax._src` (tests/properties/test_layering.py).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def cudnn_attention() -> ModuleType:
    """jax's cuDNN attention module, `jax._src.cudnn.fused_attention_stablehlo`.

    Needed by every supported jax (0.7.2 to 0.10.2). Its `dot_product_attention` takes
    per-example offsets (`q_offsets`, `kv_offsets`: packed rows, Hopper and later) and
    in-kernel dropout; its `check_compute_capability` is how jax decides whether this GPU
    has packed attention (`bert-jax compile` answers it for the target GPU). Public
    alternative: `jax.nn.dot_product_attention(implementation="cudnn")`, which takes one
    length per row (right-padded rows) and no dropout."""
    from jax._src.cudnn import fused_attention_stablehlo
    return fused_attention_stablehlo


def export_stablehlo() -> ModuleType:
    """The StableHLO dialect module `jax.export` asks for the version to serialize.

    `jax.export` calls its `get_version_from_compatibility_requirement`
    (`jax._src.export._export.hlo`).

    Needed by every supported jax (0.7.2 to 0.10.2) to write a version that TensorFlow
    can read: `jax.export` has no public setting for it. No public alternative."""
    from jax._src.export import _export
    return _export.hlo


def lowering_rules() -> dict[Any, Any]:
    """jax's table of each primitive's lowering rule.

    `jax.interpreters.mlir._lowerings`, an underscored name of a public module.

    Needed by every supported jax (0.7.2 to 0.10.2) to put back a rule replaced through the
    public `jax.interpreters.mlir.register_lowering`: jax has no public getter. No public
    alternative."""
    from jax.interpreters import mlir
    return mlir._lowerings
