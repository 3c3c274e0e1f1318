"""`bert-jax pretrain`: the command line of pretraining (bert_jax.pretrain.job is the job).

    bert-jax pretrain --config configs/pretrain.py:tiny --workdir runs/tiny \
        [--config.KEY=VALUE ...]

Running the same command again resumes from WORKDIR's latest checkpoint. SIGTERM
(preemption) checkpoints at the next step and exits with PREEMPTED_EXIT_CODE.
"""

from __future__ import annotations

import argparse

from bert_jax import flags
from bert_jax.host import folders
from bert_jax.pretrain import job
from bert_jax.train import job_cli
from bert_jax.train.config_loader import load_config


def pretrain_main(argv: list[str]) -> int:
    """`bert-jax pretrain`: parses `argv`, then pretrains.

    It pretrains under the workdir lock and the preemption watcher."""
    parser = flags.ArgumentParser(
        prog="bert-jax pretrain", description=job.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Override any config key with --config.KEY=VALUE.")
    parser.add_argument("--config", required=True, help="configs/pretrain.py[:VARIANT]")
    parser.add_argument("--workdir", required=True)
    job_cli.add_help_argument(parser, "pretrain", argv)
    job_cli.add_multihost_arguments(parser)
    args, overrides = job_cli.split_config_args(argv)
    args = parser.parse_args(args)
    job_cli.start_processes(args)

    def load():
        config = load_config(args.config, overrides, command="pretrain")
        return config, {"--config.init_from": config.init_from,
                        "--config.teacher": config.teacher}
    code, _ = job_cli.run_job(
        "pretrain", args.workdir, folders.PRETRAINING, load,
        job.train_and_evaluate)
    return code
