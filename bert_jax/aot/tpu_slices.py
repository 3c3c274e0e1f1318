"""TPU slice names as users write them -> XLA's topology arguments, and HBM per chip.

Names such as `v4-128`, `v5e-16` / `v5litepod-16`, `v5p-128` and `v6e-64` become the arguments of
`jax.experimental.topologies.get_topology_desc`; each generation has its HBM per chip.

Names follow Cloud TPU: v4 and v5p count TensorCores (two per chip: `v4-8` is 4 chips),
v5e and v6e count chips. Chips sit 4 to a host (2x2x1), except single-host v5e/v6e
slices of 8. Shapes and wrap-around links follow the Cloud TPU slice shapes (full 4x4x4
cubes of v4/v5p and 16-chip rings of v5e/v6e are tori). Imports no JAX.
"""

from __future__ import annotations

import dataclasses
import re

from bert_jax.errors import UserError

GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Generation:
    libtpu_name: str        # the prefix of libtpu's topology names ("v5e:4x4")
    chip_config: str        # "megacore" (two TensorCores as one device) or "default"
    cores_per_chip: int     # how the user-facing name counts: cores or chips
    hbm_gib: float          # HBM per chip
    shapes: dict            # chips -> physical shape


_SHAPES_3D = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4),
              128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8), 1024: (8, 8, 16),
              2048: (8, 16, 16), 4096: (16, 16, 16)}
_SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8),
              128: (8, 16), 256: (16, 16)}

GENERATIONS = {
    "v4": Generation("v4", "megacore", 2, 32, _SHAPES_3D),
    "v5p": Generation("v5", "megacore", 2, 95, _SHAPES_3D),
    "v5e": Generation("v5e", "default", 1, 16, _SHAPES_2D),
    "v6e": Generation("v6e", "default", 1, 32, _SHAPES_2D),
}
_ALIASES = {"v5litepod": "v5e", "v6litepod": "v6e"}


@dataclasses.dataclass(frozen=True)
class Topology:
    """One TPU slice type; `describe_args` are get_topology_desc's keyword arguments."""

    platform = "tpu"  # a class attribute, as GpuHosts' "gpu"
    name: str
    generation: str
    shape: tuple
    chips_per_host: tuple
    wrap: tuple
    hbm_bytes: int

    @property
    def chips(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    def describe_args(self, num_slices: int = 1) -> dict:
        gen = GENERATIONS[self.generation]
        return dict(platform="tpu", chip_config_name=gen.chip_config,
                    topology_name=f"{gen.libtpu_name}:{'x'.join(map(str, self.shape))}",
                    chips_per_host_bounds=self.chips_per_host, num_slices=num_slices,
                    wrap=self.wrap)


def names() -> list[str]:
    """Every slice name this table knows, e.g. for error messages and docs."""
    return [f"{g}-{chips * gen.cores_per_chip}" for g, gen in GENERATIONS.items()
            for chips in gen.shapes]


def resolve(name: str) -> Topology:
    """`v4-128` -> its Topology; UserError naming the known sizes otherwise."""
    match = re.fullmatch(r"(v\d+[a-z]*)-(\d+)", name.strip().lower())
    generation = _ALIASES.get(match.group(1), match.group(1)) if match else None
    if generation not in GENERATIONS:
        raise UserError(f"unknown TPU topology {name!r}: one of {', '.join(GENERATIONS)} "
                        "(or v5litepod) and a size, e.g. v4-128, v5e-16, v5p-8, v6e-256")
    gen = GENERATIONS[generation]
    count = int(match.group(2))
    chips, odd = divmod(count, gen.cores_per_chip)
    if odd or chips not in gen.shapes:
        sizes = ", ".join(str(c * gen.cores_per_chip) for c in gen.shapes)
        raise UserError(f"unknown TPU topology {name!r}: {generation} sizes are {sizes}")
    shape = gen.shapes[chips]
    if len(shape) == 3:
        wrap = (chips >= 64,) * 3
        per_host = (2, 2, 1)
    else:
        wrap = (shape[0] >= 16, shape[1] >= 16, False)
        per_host = (1, 1, 1) if chips == 1 else (2, 4, 1) if chips == 8 else (2, 2, 1)
    return Topology(f"{generation}-{count}", generation, shape, per_host, wrap,
                    int(gen.hbm_gib * GIB))
