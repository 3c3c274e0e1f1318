"""Does libtpu keep a reduce-scatter as a reduce-scatter? A probe per TPU topology.

FSDP's gradient reduction should be a reduce-scatter. docs/tpu.md found that compiled
for one host (v4-8, v5e-8) it is, and for several hosts (v4-16, v5e-16, v4-128) libtpu
emits all-reduces instead, about twice the traffic. This probe takes bert_jax out of
the question: a scanned stack of FSDP-sharded matmuls (4 layers, [256, 1024] weights in
bfloat16) differentiated two ways,

- `gspmd`: the weights gathered by a sharding constraint, the partitioner deriving the
  gradient reduction (what bert_jax's sharding does);
- `explicit`: each layer in a `shard_map` (each chip its rows of the batch), the
  weights gathered by `jax.lax.all_gather`, whose transpose is `jax.lax.psum_scatter`:
  the program handed to libtpu holds `reduce-scatter` ops,

and prints, per topology and way, the collectives in the program before and after
libtpu's compilation with their bytes per chip per step (`bert_jax.aot.collectives`).
Rerun it with a new libtpu to see whether the multi-host lowering changed.

  python bench/probe_reduce_scatter.py [--topologies v4-8,v4-16,v5e-8,v5e-16]

Needs the `tpu` extra; each compile takes seconds. Last line: one JSON object
{topology: {way: {"before": [ops], "after": {kind: bytes}}}}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bert_jax.host import backend_env  # noqa: E402  (imports no JAX)

LAYERS, WIDTH, INTERMEDIATE, ROWS_PER_CHIP = 4, 256, 1024, 8


def probe(topology_name: str, way: str) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from bert_jax.aot import collectives, tpu_slices
    from bert_jax.aot import compile as tpu_compile
    devices = tpu_compile.topology_devices(tpu_slices.resolve(topology_name))
    mesh = Mesh(np.array(devices), ("fsdp",))

    def gspmd_layer(h, w_in, w_out):
        replicated = NamedSharding(mesh, P())
        w_in, w_out = (jax.lax.with_sharding_constraint(w, replicated) for w in (w_in, w_out))
        return jnp.tanh(h @ w_in) @ w_out.T

    def explicit_layer(h, w_in, w_out):  # per chip: its rows, the gathered weights
        def local(h, w_in, w_out):
            w_in, w_out = (jax.lax.all_gather(w, "fsdp", tiled=True) for w in (w_in, w_out))
            return jnp.tanh(h @ w_in) @ w_out.T
        rows = P("fsdp", None)
        return jax.shard_map(local, mesh=mesh, in_specs=(rows, rows, rows), out_specs=rows)(
            h, w_in, w_out)

    def loss(weights, x):
        apply = gspmd_layer if way == "gspmd" else explicit_layer
        h, _ = jax.lax.scan(lambda h, pair: (apply(h, *pair), None), x, weights)
        return jnp.mean(h.astype(jnp.float32) ** 2)

    stacked = NamedSharding(mesh, P(None, "fsdp", None))
    weight = jax.ShapeDtypeStruct((LAYERS, WIDTH, INTERMEDIATE), jnp.bfloat16, sharding=stacked)
    x = jax.ShapeDtypeStruct((ROWS_PER_CHIP * len(devices), WIDTH), jnp.bfloat16,
                             sharding=NamedSharding(mesh, P("fsdp", None)))
    lowered = jax.jit(jax.grad(loss), out_shardings=(stacked, stacked)).lower((weight, weight), x)
    before = sorted(set(re.findall(r"\b(reduce-scatter|all-reduce|all-gather)\(",
                                   lowered.as_text(dialect="hlo"))))
    after = collectives.collective_bytes(lowered.compile().as_text(), None)
    return {"before": before, "after": {k: int(v) for k, v in sorted(after.items())}}


def main() -> None:
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topologies", default="v4-8,v4-16,v5e-8,v5e-16")
    args = parser.parse_args()
    backend_env.configure_backends()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    results = {}
    for topology in args.topologies.split(","):
        results[topology] = {}
        for way in ("gspmd", "explicit"):
            results[topology][way] = found = probe(topology, way)
            after = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in found["after"].items())
            print(f"{topology:8s} {way:8s} handed to libtpu: {', '.join(found['before'])}; "
                  f"compiled: {after}", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
