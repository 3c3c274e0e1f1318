"""Matching a teacher's internal states (TinyBERT, Jiao et al. 2020).

Shared by task distillation (`finetune.distill`) and general distillation in pretraining
(`pretrain.distill`): what a forward pass captures, the hidden states and attention probabilities
read from it, and the learned projection of a student's hidden states to a teacher of another width.
The losses on them are `losses.matching_losses`."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from bert_jax.errors import UserError

PROJECTION = "distill_projection"  # the projection's parameters: trained, never saved


class StudentWithProjection(nn.Module):
    """The student for training with a hidden-state projection to `teacher_width`.

    The student's parameters at the top level (shared scope, so loading, evaluation and saving see
    the student's own tree) plus PROJECTION's kernel [student width, teacher width] and bias. Calls
    run the student alone."""

    student: nn.Module
    teacher_width: int

    def setup(self):
        nn.share_scope(self, self.student)
        self.projection = nn.Dense(self.teacher_width, name=PROJECTION,
                                   param_dtype=jnp.float32)

    def __call__(self, *args, **kwargs):
        if self.is_initializing():  # create the projection with the student's parameters
            self.projection(jnp.zeros((1, self.student.config.hidden_size), jnp.float32))
        return self.student(*args, **kwargs)


def projector(projection: dict | None):
    """hidden [..., student width] -> [..., teacher width] (float32) via PROJECTION's parameters.

    The identity when there are none (equal widths)."""
    if projection is None:
        return lambda hidden: hidden
    return lambda hidden: hidden.astype(jnp.float32) @ projection["kernel"] + projection["bias"]


def is_captured(module, method: str) -> bool:
    """Embeddings, each layer and each attention block: the states TinyBERT matches."""
    name = module.name or ""
    return method == "__call__" and (name in ("embeddings", "attention")
                                     or name.startswith("layer_"))


# `Module.apply` keywords that return (outputs, {"intermediates": ...}) with those states.
CAPTURE = dict(capture_intermediates=is_captured, mutable=["intermediates"])


def _layer_calls(encoder, c) -> list:
    """(a layer's captured intermediates, which of its calls) for every applied layer, in order.

    An ALBERT layer is called once per application of its group (flax keeps one captured output per
    call)."""
    if c.model_type != "albert":
        return [(encoder[f"layer_{i}"], 0) for i in range(c.num_hidden_layers)]
    repeats = c.num_hidden_layers // c.num_hidden_groups
    return [(encoder[f"group_{g}"][f"layer_{k}"], r) for g in range(c.num_hidden_groups)
            for r in range(repeats) for k in range(c.inner_group_num)]


def captured_states(intermediates, config) -> tuple[list, list]:
    """(hidden states, attention probabilities) from the intermediates a model captured (`CAPTURE`).

    Hidden states [B, L, H]: the embeddings' then each applied layer's; attention probabilities
    [B, heads, L, L] per applied layer. The model has a `bert` encoder."""
    bert = intermediates["bert"]
    calls = _layer_calls(bert["encoder"], config)
    hidden = [bert["embeddings"]["__call__"][0]] + [layer["__call__"][r][0] for layer, r in calls]
    return hidden, [layer["attention"]["__call__"][r][1] for layer, r in calls]


def check_matching(student, teacher, *, hidden_weight: float, attention_weight: float,
                   same_heads: bool = False) -> None:
    """UserError unless the student can learn the teacher's states that the weights ask for.

    Both capturable (`check_capturable`), and with `same_heads` (attention maps compared head by
    head) as many heads."""
    if not (hidden_weight > 0 or attention_weight > 0):
        return
    check_capturable(student, teacher, attention=attention_weight > 0)
    heads = student.num_attention_heads, teacher.num_attention_heads
    if same_heads and attention_weight > 0 and heads[0] != heads[1]:
        raise UserError(f"attention_weight compares attention maps head by head, but the "
                        f"student has {heads[0]} heads and the teacher {heads[1]}: give the "
                        f"student {heads[1]} heads or set --config.attention_weight=0")


def check_capturable(student, teacher, *, attention: bool) -> None:
    """UserError unless both configs give their states to `captured_states`.

    That takes unrolled layers, and (attention: True) einsum attention, which returns its
    probabilities."""
    for who, c in (("student", student), ("teacher", teacher)):
        if c.scan_layers:
            raise UserError(f"hidden/attention matching needs unrolled layers; the {who} "
                            "has scan_layers=True")
    if attention and "fused" in (student.attention_impl, teacher.attention_impl):
        raise UserError("attention_weight needs attention_impl=einsum (fused attention "
                        "returns no probabilities)")
