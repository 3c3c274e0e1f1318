"""Device meshes and the logical-axis rules that place arrays on them (`Partitioner`).

The model names logical axes only (`bert_jax.models.encoder`); this module maps them
onto a mesh with three axes:

  data    pure data parallelism: the batch is split, parameters replicated
  fsdp    the batch is split *and* parameters/optimizer state are sharded
          along `embed` (ZeRO-3 style; gathered per layer by XLA)
  tensor  Megatron-style: heads, MLP columns and vocab are split

Switching between them is a change of `mesh_shape` (and, if wanted, of the
rules), never of code. Every function is multi-process aware: meshes span all
processes' devices and batches are assembled from each process's local rows. The
TrainState's sharded creation is `bert_jax.train.train_state.StatePlan`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax.errors import UserError
from bert_jax.train.axis_rules import DEFAULT_LOGICAL_AXIS_RULES, MESH_AXES


def _axis_sizes(shape: Mapping[str, int] | Sequence[int], axis_names: Sequence[str],
                count: int, what: str) -> list[int]:
    """Sizes per axis from a mapping or sequence with at most one -1 ("the rest").

    Checked to multiply to `count`."""
    if isinstance(shape, Mapping):
        unknown = sorted(set(shape) - set(axis_names))
        if unknown:
            raise UserError(f"{what} has unknown axes {unknown}; known: {list(axis_names)}")
        sizes = [int(shape.get(name, 1)) for name in axis_names]
    else:
        sizes = [int(s) for s in shape]
        if len(sizes) != len(axis_names):
            raise UserError(f"{what} {sizes} needs one size per axis {list(axis_names)}")
    if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
        raise UserError(f"{what} {sizes}: sizes must be positive, at most one -1")
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if count % known:
            raise UserError(f"{what} {dict(zip(axis_names, sizes))} does not divide "
                            f"{count} devices")
        sizes[sizes.index(-1)] = count // known
    if int(np.prod(sizes)) != count:
        raise UserError(f"{what} {dict(zip(axis_names, sizes))} needs {np.prod(sizes)} "
                        f"devices; there are {count}")
    return sizes


def num_slices(devices: Sequence[jax.Device]) -> int:
    """How many TPU slices (joined by the data-center network) the devices span.

    1 for other platforms, whose hosts' meshes `mesh_shape` describes whole."""
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


@dataclasses.dataclass(frozen=True)
class Partitioner:
    """The device mesh and the logical-axis rules that map the model's logical axes onto it.

    How every job places parameters, state and batches. Built in one place from a run config
    (`from_config`); rules are kept as a tuple of (logical axis, mesh axes) pairs."""

    mesh: jax.sharding.Mesh
    rules: tuple[tuple[str, Any], ...] = DEFAULT_LOGICAL_AXIS_RULES

    def __post_init__(self):
        object.__setattr__(self, "rules", tuple(tuple(r) for r in self.rules))

    @classmethod
    def from_config(cls, config, devices: Sequence[jax.Device] | None = None) -> "Partitioner":
        """A run config's partitioner, the one place every job builds it.

        Every job: pretraining, fine-tuning, distillation, inference. `mesh_shape` within a slice,
        `dcn_mesh_shape` across slices (`make_mesh`), `logical_axis_rules`."""
        mesh = make_mesh(dict(config.mesh_shape), devices=devices,
                         dcn_mesh_shape=dict(config.dcn_mesh_shape))
        return cls(mesh, config.logical_axis_rules)

    def shardings_of(self, logical_specs: Any) -> Any:
        """A tree of logical PartitionSpecs -> the same tree of NamedShardings.

        For example `nn.get_partition_spec(abstract_params)`."""
        return nn.logical_to_mesh_sharding(logical_specs, self.mesh, self.rules)

    @property
    def replicated(self) -> NamedSharding:
        """Every device holds the whole array."""
        return NamedSharding(self.mesh, P())

    @property
    def batch_sharding(self) -> NamedSharding:
        """Leading (batch) dimension split like `activation_batch`, the rest replicated."""
        return NamedSharding(self.mesh, P(*nn.logical_to_mesh_axes(("activation_batch",),
                                                                     self.rules)))

    @property
    def batch_shards(self) -> int:
        """How many ways the batch is split: the global batch must be a multiple of this."""
        spec = self.batch_sharding.spec[0]
        names = () if spec is None else (spec,) if isinstance(spec, str) else tuple(spec)
        return int(np.prod([self.mesh.shape[n] for n in names]))

    def global_batch(self, local_batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        """This process's rows -> global arrays sharded on the batch dimension.

        The rows {key: [B_local, ...]} become global arrays [B_local * processes, ...]. Every
        process calls it with its own rows."""
        sharding = self.batch_sharding
        return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
                for k, v in local_batch.items()}

    def shard_full_batch(self, batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        """The same whole global batch on every process -> global arrays sharded by batch.

        The batch is {key: [B, ...]}, sharded on the batch dimension; rows stay in their original
        order; each process places only its own devices' rows. For host-side data every process
        builds alike (fine-tuning sets), where `global_batch` wants each process's own rows."""
        sharding = self.batch_sharding
        arrays = {k: np.asarray(v) for k, v in batch.items()}
        return {k: jax.make_array_from_callback(v.shape, sharding, lambda index, v=v: v[index])
                for k, v in arrays.items()}
