"""Device meshes, logical-axis rules and sharded state creation.

The model names logical axes only (`bert_jax.model`); this module maps them
onto a mesh with three axes:

  data    pure data parallelism: the batch is split, parameters replicated
  fsdp    the batch is split *and* parameters/optimizer state are sharded
          along `embed` (ZeRO-3 style; gathered per layer by XLA)
  tensor  Megatron-style: heads, MLP columns and vocab are split

Switching between them is a change of `mesh_shape` (and, if wanted, of the
rules), never of code. Every function is multi-process aware: meshes span all
processes' devices and batches are assembled from each process's local rows.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from bert_jax.axis_rules import DEFAULT_LOGICAL_AXIS_RULES
from bert_jax.train_state import TrainState, make_key

MESH_AXES = ("data", "fsdp", "tensor")

LogicalRules = Sequence[tuple[str, Any]]


def _axis_sizes(shape: Mapping[str, int] | Sequence[int], axis_names: Sequence[str],
                count: int, what: str) -> list[int]:
    """Sizes per axis from a mapping or sequence with at most one -1 ("the rest"), checked
    to multiply to `count`."""
    if isinstance(shape, Mapping):
        unknown = sorted(set(shape) - set(axis_names))
        if unknown:
            raise ValueError(f"{what} has unknown axes {unknown}; known: {list(axis_names)}")
        sizes = [int(shape.get(name, 1)) for name in axis_names]
    else:
        sizes = [int(s) for s in shape]
        if len(sizes) != len(axis_names):
            raise ValueError(f"{what} {sizes} needs one size per axis {list(axis_names)}")
    if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
        raise ValueError(f"{what} {sizes}: sizes must be positive, at most one -1")
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if count % known:
            raise ValueError(f"{what} {dict(zip(axis_names, sizes))} does not divide "
                             f"{count} devices")
        sizes[sizes.index(-1)] = count // known
    if int(np.prod(sizes)) != count:
        raise ValueError(f"{what} {dict(zip(axis_names, sizes))} needs {np.prod(sizes)} "
                         f"devices; there are {count}")
    return sizes


def num_slices(devices: Sequence[jax.Device]) -> int:
    """How many TPU slices (joined by the data-center network) the devices span; 1 for
    other platforms, whose hosts' meshes `mesh_shape` describes whole."""
    return len({getattr(d, "slice_index", 0) if d.platform == "tpu" else 0
                for d in devices})


def make_mesh(mesh_shape: Mapping[str, int] | Sequence[int] | None = None,
              axis_names: Sequence[str] = MESH_AXES,
              devices: Sequence[jax.Device] | None = None,
              dcn_mesh_shape: Mapping[str, int] | Sequence[int] | None = None
              ) -> jax.sharding.Mesh:
    """A mesh over all devices of all processes, with Auto (pjit-style) axes.

    mesh_shape: sizes per axis name within one slice, e.g. `{"data": -1, "fsdp": 2,
    "tensor": 1}`, or a sequence in `axis_names` order; one size may be -1 ("the rest").
    Default: everything on `data`. Axes missing from a mapping get size 1.
    dcn_mesh_shape: on devices of several TPU slices (multi-slice), how each axis is
    split across slices, over the slower data-center network (default: `data` across
    all slices); each mesh axis is then its slice part times its DCN part, built with
    `mesh_utils.create_hybrid_device_mesh` so that only the DCN parts cross slices.
    """
    devices = list(jax.devices() if devices is None else devices)
    if mesh_shape is None:
        mesh_shape = {axis_names[0]: -1}
    slices = num_slices(devices)
    dcn = _axis_sizes(dcn_mesh_shape or {axis_names[0]: -1}, axis_names, slices,
                      "dcn_mesh_shape")
    ici = _axis_sizes(mesh_shape, axis_names, len(devices) // slices,
                      "mesh_shape" + (" (per slice)" if slices > 1 else ""))
    axis_types = (AxisType.Auto,) * len(axis_names)
    if slices == 1:
        return jax.make_mesh(tuple(ici), tuple(axis_names), axis_types=axis_types,
                             devices=devices)
    from jax.experimental import mesh_utils
    grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices,
                                                allow_split_physical_axes=True)
    return jax.sharding.Mesh(grid, tuple(axis_names), axis_types=axis_types)


def config_mesh(config, devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
    """The mesh of a run config, the one place every job (pretraining, fine-tuning,
    distillation, inference) builds it: `mesh_shape` within a slice, `dcn_mesh_shape`
    across slices (`make_mesh`)."""
    # .get: configs written before dcn_mesh_shape existed (saved with models, copied
    # config files) mean the default, `data` across the slices.
    return make_mesh(dict(config.mesh_shape), devices=devices,
                     dcn_mesh_shape=dict(config.dcn_mesh_shape))


def logical_to_sharding(logical_specs: Any, mesh: jax.sharding.Mesh,
                        rules: LogicalRules = DEFAULT_LOGICAL_AXIS_RULES) -> Any:
    """A tree of logical PartitionSpecs (e.g. `nn.get_partition_spec(abstract_params)`)
    -> the same tree of NamedShardings."""
    return nn.logical_to_mesh_sharding(logical_specs, mesh, [tuple(r) for r in rules])


def batch_sharding(mesh: jax.sharding.Mesh,
                   rules: LogicalRules = DEFAULT_LOGICAL_AXIS_RULES) -> NamedSharding:
    """Leading (batch) dimension split like `activation_batch`, the rest replicated."""
    axes = nn.logical_to_mesh_axes(("activation_batch",), [tuple(r) for r in rules])
    return NamedSharding(mesh, P(*axes))


def batch_size_multiple(mesh: jax.sharding.Mesh,
                        rules: LogicalRules = DEFAULT_LOGICAL_AXIS_RULES) -> int:
    """How many ways the batch is split: the global batch must be a multiple of this."""
    spec = batch_sharding(mesh, rules).spec[0]
    names = () if spec is None else (spec,) if isinstance(spec, str) else tuple(spec)
    return int(np.prod([mesh.shape[n] for n in names]))


def global_batch(local_batch: Mapping[str, np.ndarray], mesh: jax.sharding.Mesh,
                 rules: LogicalRules = DEFAULT_LOGICAL_AXIS_RULES) -> dict[str, jax.Array]:
    """This process's rows {key: [B_local, ...]} -> global arrays [B_local * processes, ...]
    sharded on the batch dimension. Every process calls it with its own rows."""
    sharding = batch_sharding(mesh, rules)
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
            for k, v in local_batch.items()}


def shard_full_batch(batch: Mapping[str, np.ndarray], mesh: jax.sharding.Mesh,
                     rules: LogicalRules = DEFAULT_LOGICAL_AXIS_RULES) -> dict[str, jax.Array]:
    """The same whole global batch {key: [B, ...]} on every process -> global arrays
    sharded on the batch dimension, rows in their original order; each process
    places only its own devices' rows. For host-side data every process builds alike
    (fine-tuning sets), where `global_batch` wants each process's own rows."""
    sharding = batch_sharding(mesh, rules)
    arrays = {k: np.asarray(v) for k, v in batch.items()}
    return {k: jax.make_array_from_callback(v.shape, sharding, lambda index, v=v: v[index])
            for k, v in arrays.items()}


def _dict_key_suffix(path) -> tuple[str, ...]:
    """The trailing run of dict keys of a tree path: the parameter path inside an
    optimizer state leaf such as `[1][0].mu['bert']['encoder']...`."""
    keys = []
    for entry in reversed(path):
        if not isinstance(entry, jax.tree_util.DictKey):
            break
        keys.append(str(entry.key))
    return tuple(reversed(keys))


def state_shardings(abstract_state: TrainState, param_shardings: Any,
                    mesh: jax.sharding.Mesh) -> TrainState:
    """Shardings for every leaf of a TrainState.

    Parameters take `param_shardings`; optimizer-state leaves that mirror a
    parameter (Adam moments, accumulated gradients, ...) take that parameter's
    sharding; everything else (counts, step, rng) is replicated.
    """
    replicated = NamedSharding(mesh, P())
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


def check_divisible(abstract_params: Any, shardings: Any) -> None:
    """Fails naming the parameter when a sharded dimension does not divide evenly."""
    for (path, leaf), sharding in zip(jax.tree_util.tree_leaves_with_path(abstract_params),
                                      jax.tree.leaves(shardings)):
        for dim, axes in zip(leaf.shape, sharding.spec):
            names = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
            ways = int(np.prod([sharding.mesh.shape[n] for n in names]))
            if dim % ways:
                raise ValueError(
                    f"parameter {jax.tree_util.keystr(path)} {tuple(leaf.shape)}: dimension "
                    f"{dim} cannot be split {ways} ways over mesh axes {names}; change "
                    "mesh_shape or logical_axis_rules")


def _state_init_fn(init_fn, tx, rng_impl):
    def init_state(seed):
        # Parameters always from a threefry key: the same initial weights whatever rng_impl.
        params = nn.unbox(init_fn(jax.random.fold_in(make_key(seed), 0)))
        return TrainState.create(params, tx, jax.random.fold_in(make_key(seed, rng_impl), 1))
    return init_state


def _plan(init_fn, tx, mesh, rules, rng_impl):
    """(state init function of an int seed, abstract TrainState, TrainState of shardings)."""
    init_state = _state_init_fn(init_fn, tx, rng_impl)
    boxed = jax.eval_shape(init_fn, make_key(0))
    param_shardings = logical_to_sharding(nn.get_partition_spec(boxed), mesh, rules)
    shapes = jax.eval_shape(init_state, 0)
    check_divisible(shapes.params, param_shardings)
    return init_state, shapes, state_shardings(shapes, param_shardings, mesh)


def create_sharded_state(init_fn: Callable[[jax.Array], Any], tx: optax.GradientTransformation,
                         mesh: jax.sharding.Mesh, *,
                         rules: LogicalRules = DEFAULT_LOGICAL_AXIS_RULES,
                         seed: int = 0, rng_impl: str = "threefry"
                         ) -> tuple[TrainState, TrainState]:
    """Initialises a TrainState directly in its sharded layout.

    init_fn: key -> parameter tree boxed with logical axes, typically
        `lambda key: model.init(key, *dummy_inputs)['params']`.
    The parameters are drawn from `fold_in(key(seed), 0)` (threefry), the state's base
    rng is `fold_in(key(seed, impl=rng_impl), 1)` (`train_state.RNG_IMPLS`). Shapes
    come from `jax.eval_shape`, shardings from the logical annotations and `rules`, and
    the init runs under `jax.jit` with those out_shardings, so full parameters never
    exist on a single device.
    Returns (state, shardings), `shardings` being a TrainState of NamedShardings to
    pass as in/out shardings of the train step. To start from pretrained weights,
    `jax.device_put` them with `shardings.params` and replace the params.
    """
    init_state, _, shardings = _plan(init_fn, tx, mesh, rules, rng_impl)
    # Traced without a mesh context on purpose: the out_shardings place the result,
    # and flax's DenseGeneral would apply its 3-axis kernel constraint to the flat
    # kernel it initialises.
    state = jax.jit(init_state, out_shardings=shardings)(seed)
    return state, shardings


def abstract_state(init_fn: Callable[[jax.Array], Any], tx: optax.GradientTransformation,
                   mesh: jax.sharding.Mesh, *,
                   rules: LogicalRules = DEFAULT_LOGICAL_AXIS_RULES,
                   rng_impl: str = "threefry") -> TrainState:
    """The TrainState's shapes as `jax.ShapeDtypeStruct`s carrying their shardings on
    `mesh`: the restore target for a checkpoint (any saved mesh or device count)."""
    _, shapes, shardings = _plan(init_fn, tx, mesh, rules, rng_impl)
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                        shapes, shardings)
