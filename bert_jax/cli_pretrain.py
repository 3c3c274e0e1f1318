"""`bert-jax pretrain`: the command line of pretraining (bert_jax.pretrain is the job).

    bert-jax pretrain --config configs/pretrain.py:tiny --workdir runs/tiny \
        [--config.KEY=VALUE ...]

Running the same command again resumes from WORKDIR's latest checkpoint. SIGTERM
(preemption) checkpoints at the next step and exits with PREEMPTED_EXIT_CODE.
"""

from __future__ import annotations

import argparse
import sys

from bert_jax import flags, multihost, preemption, pretrain, workdir_kind, workdir_lock
from bert_jax.config_loader import load_config, split_config_args
from bert_jax.errors import is_out_of_memory, out_of_memory


def main(argv: list[str]) -> int:
    """Parses `argv`, then pretrains under the workdir lock and the preemption watcher."""
    parser = flags.ArgumentParser(
        prog="bert-jax pretrain", description=pretrain.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Override any config key with --config.KEY=VALUE.")
    parser.add_argument("--config", required=True, help="configs/pretrain.py[:VARIANT]")
    parser.add_argument("--workdir", required=True)
    multihost.add_arguments(parser)
    args, overrides = split_config_args(argv)
    args = parser.parse_args(args)
    multihost.initialize(args)
    # From here on SIGTERM means: checkpoint at the next step, then stop.
    with preemption.Watcher() as watcher:
        config = load_config(args.config, overrides, command="pretrain")
        with workdir_lock.hold(args.workdir, "bert-jax pretrain", multihost.is_primary(),
                               kind=workdir_kind.PRETRAINING,
                               inputs={"--config.init_from": config.init_from,
                                       "--config.teacher": config.teacher}):
            try:
                pretrain.train_and_evaluate(config, args.workdir, watcher)
            except preemption.Preempted as e:
                if multihost.is_primary():
                    print(e, file=sys.stderr)
                return preemption.PREEMPTED_EXIT_CODE
            except Exception as e:  # noqa: BLE001 - only the out-of-memory error is reworded
                if is_out_of_memory(e):
                    raise out_of_memory(batch_size=config.global_batch_size,
                                        seq_length=config.max_seq_length,
                                        levers=pretrain.MEMORY_LEVERS) from e
                raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
