"""The command line every training command shares, and the wrapper each job runs in.

The commands are `pretrain`, `finetune`, `distill` (`compile` for its config). The command line:
`--config.KEY=VALUE` overrides, `--help_config`, the multi-process flags. The wrapper: the
preemption watcher (SIGTERM: a checkpoint at the next step, then exit PREEMPTED_EXIT_CODE), the
workdir lock, and the device's out-of-memory error reworded as one line with what to change. Each
command parses its own other flags."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Sequence

from bert_jax.errors import UserError, check_positive, is_out_of_memory, out_of_memory
from bert_jax.host import outputs, workdir_lock
from bert_jax.train import config_loader, multihost, preemption, run_config


def run_job(command: str, workdir: str, kind: str, load: Callable[[], tuple[Any, dict]],
            job: Callable[[Any, str], Any]) -> tuple[int, Any]:
    """Runs a training command's job under the preemption watcher and the workdir lock.

    Returns (exit code, result). `load()` -> (config, the run's inputs) runs under the watcher
    already (a SIGTERM while loading stops the run after its first step); `workdir` is then checked
    against the inputs, once (`outputs.check_workdir`), and `job(config, checked workdir)` runs
    under the lock of `workdir` (a `folders` `kind`); its loop finds the watcher with
    `preemption.active()`. A preempted job gives (PREEMPTED_EXIT_CODE, None)."""
    with preemption.Watcher():
        config, inputs = load()
        checked = outputs.check_workdir(workdir, kind, inputs)
        try:
            with workdir_lock.hold(checked, f"bert-jax {command}", multihost.is_primary(),
                                   kind=kind):
                return 0, job(config, checked)
        except preemption.Preempted as e:
            if multihost.is_primary():
                print(e, file=sys.stderr)
            return preemption.PREEMPTED_EXIT_CODE, None
        except Exception as e:  # noqa: BLE001 - only the out-of-memory error is reworded
            if is_out_of_memory(e):
                raise out_of_memory(batch_size=config.global_batch_size,
                                    seq_length=config.max_seq_length,
                                    grad_accum_steps=config.grad_accum_steps) from e
            raise


def add_multihost_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of a multi-process run (`start_processes`)."""
    parser.add_argument("--coordinator_address", default=None,
                        help="multi-process: host:port of process 0 (else from the "
                             "environment, automatic on TPU pods and SLURM)")
    parser.add_argument("--num_processes", type=int, default=None)
    parser.add_argument("--process_id", type=int, default=None)


def start_processes(args: argparse.Namespace) -> None:
    """`multihost.initialize` with the flags of `add_multihost_arguments`."""
    if args.num_processes is not None:
        check_positive("--num_processes", args.num_processes)
    if args.process_id is not None:
        check_positive("--process_id", args.process_id, allow_zero=True)
    multihost.initialize(args.coordinator_address, args.num_processes, args.process_id)


def split_config_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separates `--config.KEY=VALUE` / `--config.KEY VALUE` overrides from other args.

    Returns (other args, overrides as KEY=VALUE)."""
    rest, overrides = [], []
    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config."):
            if "=" in arg:
                overrides.append(arg[len("--config."):])
            elif i + 1 < len(argv):
                overrides.append(f"{arg[len('--config.'):]}={argv[i + 1]}")
                i += 1
            else:
                raise UserError(f"{arg} needs a value")
        else:
            rest.append(arg)
        i += 1
    return rest, overrides


def add_help_argument(parser: argparse.ArgumentParser, command: str,
                      argv: list[str] = ()) -> None:
    """`--help_config`: print `command`'s schema with the values of the chosen config, and exit 0.

    The config is the one `argv` (the command's arguments) chooses: --config FILE[:VARIANT] and
    --config.KEY overrides. It exits 0 as --help does."""
    class _Help(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            rest, overrides = split_config_args(argv)
            chosen = argparse.ArgumentParser(add_help=False)
            chosen.add_argument("--config", default=parser.get_default("config"))
            spec = chosen.parse_known_args(rest)[0].config
            config = None if spec is None else \
                config_loader.load_config(spec, overrides, command=command)
            print(f"The keys of a `bert-jax {command}` config (--config.KEY=VALUE)"
                  f"{f' with the values of {spec}' if spec else ''}; 'resume may change': "
                  "a resumed run may take a new value.\n")
            print(run_config.describe(run_config.SCHEMAS[command], config))
            parser.exit(0)
    parser.add_argument("--help_config", nargs=0, action=_Help,
                        help="list every config key: type, default, range, description")
