"""The training state.

One pytree that the train step maps to the next one, and its creation in its sharded layout
(`StatePlan`).

Kept free of callables (no `apply_fn`, no `tx`) so it can be donated, sharded,
saved and restored as plain arrays; the model and optimizer are bound into
the step function instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.errors import UserError
from bert_jax.models.config import check_choice
from bert_jax.train.sharding import Partitioner

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
    """The state a training run carries from step to step.

    step: int32 []; params: the model's parameter tree (unboxed); opt_state: the optimizer's state;
    rng: uint32 raw key data of the run's base key ([2] for threefry, [4] for rbg and unsafe_rbg);
    nonfinite_steps: int32 [], how many updates were skipped for a NaN/Inf; rng_impl: the key's
    implementation (a static field: part of the tree structure, not an array)."""

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
        """The key of this step.

        A pure function of the base key and the step number, so a resumed run draws exactly the
        masks and dropout of an uninterrupted one (with the same rng_impl, on the same platform for
        rbg / unsafe_rbg)."""
        key = jax.random.wrap_key_data(self.rng, impl=RNG_IMPLS[self.rng_impl])
        return jax.random.fold_in(key, self.step)


def _dict_key_suffix(path) -> tuple[str, ...]:
    """The trailing run of dict keys of a tree path.

    The parameter path inside an optimizer state leaf such as `[1][0].mu['bert']['encoder']...`."""
    keys = []
    for entry in reversed(path):
        if not isinstance(entry, jax.tree_util.DictKey):
            break
        keys.append(str(entry.key))
    return tuple(reversed(keys))


def state_shardings(abstract_state: TrainState, param_shardings: Any,
                    partitioner: Partitioner) -> TrainState:
    """Shardings for every leaf of a TrainState.

    Parameters take `param_shardings`; optimizer-state leaves that mirror a
    parameter (Adam moments, accumulated gradients, ...) take that parameter's
    sharding; everything else (counts, step, rng) is replicated.
    """
    replicated = partitioner.replicated
    by_path = {_dict_key_suffix(path): (leaf, sharding) for (path, leaf), sharding in zip(
        jax.tree_util.tree_leaves_with_path(abstract_state.params),
        jax.tree.leaves(param_shardings))}

    def for_opt_leaf(path, leaf):
        key = _dict_key_suffix(path)
        for start in range(len(key)):
            match = by_path.get(key[start:])
            if match is not None and match[0].shape == leaf.shape:
                return match[1]
        return replicated

    opt = jax.tree_util.tree_map_with_path(for_opt_leaf, abstract_state.opt_state)
    return TrainState(step=replicated, params=param_shardings, opt_state=opt, rng=replicated,
                      nonfinite_steps=replicated, rng_impl=abstract_state.rng_impl)


def check_params_split_evenly(abstract_params: Any, shardings: Any) -> None:
    """Fails naming the parameter when a sharded dimension does not divide evenly."""
    for (path, leaf), sharding in zip(jax.tree_util.tree_leaves_with_path(abstract_params),
                                      jax.tree.leaves(shardings)):
        for dim, axes in zip(leaf.shape, sharding.spec):
            names = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
            ways = int(np.prod([sharding.mesh.shape[n] for n in names]))
            if dim % ways:
                raise UserError(
                    f"parameter {jax.tree_util.keystr(path)} {tuple(leaf.shape)}: dimension "
                    f"{dim} cannot be split {ways} ways over mesh axes {names}; change "
                    "mesh_shape or logical_axis_rules")


def _state_init_fn(init_fn, tx, rng_impl):
    """int seed -> the step-0 TrainState, unsharded (`StatePlan.create` jits it)."""
    def init_state(seed):
        # Parameters always from a threefry key: the same initial weights whatever rng_impl.
        params = nn.unbox(init_fn(jax.random.fold_in(make_key(seed), 0)))
        return TrainState.create(params, tx, jax.random.fold_in(make_key(seed, rng_impl), 1))
    return init_state


@dataclasses.dataclass(frozen=True)
class StatePlan:
    """A TrainState's layout on a partitioner, worked out once per model and optimizer.

    `abstract`, its shapes as `jax.ShapeDtypeStruct`s carrying their shardings (the restore target
    for a checkpoint of any saved mesh or device count); `shardings`, a TrainState of NamedShardings
    (the in/out shardings of the train step); and `create`, a fresh state in that layout."""

    init_state: Callable[[int], TrainState]
    abstract: TrainState
    shardings: TrainState

    @classmethod
    def build(cls, init_fn: Callable[[jax.Array], Any], tx: optax.GradientTransformation,
              partitioner: Partitioner, rng_impl: str = "threefry") -> "StatePlan":
        """A StatePlan from `init_fn` and `tx` on `partitioner`'s mesh.

        init_fn: key -> parameter tree boxed with logical axes, typically
        `lambda key: model.init(key, *dummy_inputs)['params']`. Shapes come from `jax.eval_shape`,
        shardings from the logical annotations and the partitioner's rules; a sharded dimension that
        does not divide evenly fails here, naming the parameter. rng_impl: the state's key
        implementation (`RNG_IMPLS`)."""
        init_state = _state_init_fn(init_fn, tx, rng_impl)
        boxed = jax.eval_shape(init_fn, make_key(0))
        param_shardings = partitioner.shardings_of(nn.get_partition_spec(boxed))
        shapes = jax.eval_shape(init_state, 0)
        check_params_split_evenly(shapes.params, param_shardings)
        shardings = state_shardings(shapes, param_shardings, partitioner)
        abstract = jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)
        return cls(init_state, abstract, shardings)

    def create(self, seed: int) -> TrainState:
        """A step-0 TrainState initialised directly in its sharded layout.

        The parameters drawn from `fold_in(key(seed), 0)` (threefry), the base rng
        `fold_in(key(seed, impl=rng_impl), 1)`. The init runs under `jax.jit` with `shardings` as
        out_shardings, so full parameters never exist on a single device. To start from pretrained
        weights, `jax.device_put` them with `shardings.params` and replace the params."""
        # Traced without a mesh context on purpose: the out_shardings place the result,
        # and flax's DenseGeneral would apply its 3-axis kernel constraint to the flat
        # kernel it initialises.
        return jax.jit(self.init_state, out_shardings=self.shardings)(seed)
