"""The training state: one pytree that the train step maps to the next one.

Kept free of callables (no `apply_fn`, no `tx`) so it can be donated, sharded,
saved and restored as plain arrays; the model and optimizer are bound into
the step function instead.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax


@flax.struct.dataclass
class TrainState:
    """step: int32 []; params: the model's parameter tree (unboxed); opt_state: the
    optimizer's state; rng: uint32 [2] raw key data of the run's base key;
    nonfinite_steps: int32 [], how many updates were skipped for a NaN/Inf."""

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array
    nonfinite_steps: jax.Array

    @classmethod
    def create(cls, params: Any, tx: optax.GradientTransformation, rng: jax.Array):
        """A step-0 state; `rng` is a typed key (`jax.random.key(seed)`)."""
        return cls(step=jnp.zeros([], jnp.int32), params=params, opt_state=tx.init(params),
                   rng=jax.random.key_data(rng), nonfinite_steps=jnp.zeros([], jnp.int32))

    def step_rng(self) -> jax.Array:
        """The key of this step: a pure function of the base key and the step number,
        so a resumed run draws exactly the masks and dropout of an uninterrupted one."""
        return jax.random.fold_in(jax.random.wrap_key_data(self.rng), self.step)
