"""Multi-process runs: the command-line flags, `jax.distributed` start-up, barriers.

`bert-jax pretrain` and `bert-jax finetune` take the same flags. On TPU pods, SLURM
and Open MPI, `jax.distributed.initialize()` finds its peers on its own; elsewhere
(e.g. two processes on one machine) pass `--coordinator_address`, `--num_processes`
and `--process_id`.
"""

from __future__ import annotations

import argparse
import logging
import os

import jax


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator_address", default=None,
                        help="multi-process: host:port of process 0 (else from the "
                             "environment, automatic on TPU pods and SLURM)")
    parser.add_argument("--num_processes", type=int, default=None)
    parser.add_argument("--process_id", type=int, default=None)


def initialize(args: argparse.Namespace) -> None:
    """Starts `jax.distributed` when asked to or when a launcher set it up; logs at
    INFO on process 0 only."""
    if args.coordinator_address or args.num_processes or _launcher_environment():
        jax.distributed.initialize(coordinator_address=args.coordinator_address,
                                   num_processes=args.num_processes,
                                   process_id=args.process_id)
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
