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

from bert_jax.config import check_choice

# The dropout key's PRNG implementation, by config name (`rng_impl`). threefry: the
# same random bits on every platform and version; rbg / unsafe_rbg: XLA's
# RngBitGenerator, much cheaper masks on accelerators, but the bits may differ across
# platforms and jax versions. See docs/performance.md.
RNG_IMPLS = {"threefry": "threefry2x32", "rbg": "rbg", "unsafe_rbg": "unsafe_rbg"}


def make_key(seed, rng_impl: str = "threefry") -> jax.Array:
    """A typed key of `seed` (int, or a traced int) with the named implementation."""
    check_choice("rng_impl", rng_impl, tuple(RNG_IMPLS))
    return jax.random.key(seed, impl=RNG_IMPLS[rng_impl])


@flax.struct.dataclass
class TrainState:
    """step: int32 []; params: the model's parameter tree (unboxed); opt_state: the
    optimizer's state; rng: uint32 raw key data of the run's base key ([2] for
    threefry, [4] for rbg and unsafe_rbg); nonfinite_steps: int32 [], how many updates
    were skipped for a NaN/Inf; rng_impl: the key's implementation (a static field:
    part of the tree structure, not an array)."""

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array
    nonfinite_steps: jax.Array
    rng_impl: str = flax.struct.field(pytree_node=False, default="threefry")

    @classmethod
    def create(cls, params: Any, tx: optax.GradientTransformation, rng: jax.Array):
        """A step-0 state; `rng` is a typed key (`make_key(seed, rng_impl)`)."""
        impl = str(jax.random.key_impl(rng))
        rng_impl = next(name for name, full in RNG_IMPLS.items() if full == impl)
        return cls(step=jnp.zeros([], jnp.int32), params=params, opt_state=tx.init(params),
                   rng=jax.random.key_data(rng), nonfinite_steps=jnp.zeros([], jnp.int32),
                   rng_impl=rng_impl)

    def step_rng(self) -> jax.Array:
        """The key of this step: a pure function of the base key and the step number,
        so a resumed run draws exactly the masks and dropout of an uninterrupted one
        (with the same rng_impl, on the same platform for rbg / unsafe_rbg)."""
        key = jax.random.wrap_key_data(self.rng, impl=RNG_IMPLS[self.rng_impl])
        return jax.random.fold_in(key, self.step)
