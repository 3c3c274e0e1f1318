"""Multi-process runs: `jax.distributed` start-up, barriers.

On TPU pods, SLURM and Open MPI, `jax.distributed.initialize()` finds its peers on its
own; elsewhere (e.g. two processes on one machine) `bert-jax pretrain`, `finetune` and
`distill` take `--coordinator_address`, `--num_processes` and `--process_id`
(`bert_jax.train.job_cli.add_multihost_arguments`).
"""

from __future__ import annotations

import logging
import os

import jax


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
    """Starts `jax.distributed` when asked to (the arguments) or when a launcher set it up.

    Logs at INFO on process 0 only."""
    if coordinator_address or num_processes or _launcher_environment():
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=num_processes, process_id=process_id)
    logging.basicConfig(level=logging.INFO if jax.process_index() == 0 else logging.ERROR,
                        format="%(levelname)s %(name)s: %(message)s")


def _launcher_environment() -> bool:
    """Launchers that jax.distributed.initialize() reads on its own."""
    env = os.environ
    return ("JAX_COORDINATOR_ADDRESS" in env or int(env.get("SLURM_NTASKS", 1)) > 1
            or int(env.get("OMPI_COMM_WORLD_SIZE", 1)) > 1
            or "," in env.get("TPU_WORKER_HOSTNAMES", ""))


def is_primary() -> bool:
    """Process 0 writes the files every process would otherwise write alike."""
    return jax.process_index() == 0


def sync(name: str) -> None:
    """A barrier across processes (a no-op in a single process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)
