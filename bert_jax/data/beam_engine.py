"""create-data as an Apache Beam pipeline (`--beam_pipeline_options`): corpora beyond one machine.

The pipeline runs the local engine's two steps (`shard_parts`) as Beam transforms:

    input files and tfds pieces -> Reshuffle -> convert, one file per call (`convert_file`, with the
    random generators of (seed, file index, dupe index)) -> parts, in a hidden folder beside the
    output -> each shard's byte ranges -> Reshuffle -> one shard per call, into that folder

and the launching process renames the shards into place once the pipeline has succeeded (nothing
appears under a final name before) and writes summary.json from the parts' statistics. The shards
are therefore byte for byte those of the local engine, whatever the runner and its workers.

The unit of work is one input file, because a file's random next sentences come from the file
itself: a runner balances files, not bytes, so split a big corpus into many files (several per
worker; `split -n l/256 corpus.txt part-` keeps lines whole) and put the biggest first. A corpus by
name (`tfds:NAME`) comes as 64 pieces or more, each read by a worker.

Options are `key=value` pairs separated by commas, as `tfds build --beam_pipeline_options` takes
them. Without `runner`, FnApiRunner: Beam's engine in this process (`direct_running_mode=
multi_processing,direct_num_workers=N` for N worker processes), which never reaches the network.
`runner=DirectRunner` first tries Beam's Prism runner, which downloads a binary at run time, and
falls back to FnApiRunner when that fails. A cluster runner (DataflowRunner, FlinkRunner,
SparkRunner) writes from its workers, so the output must be a bucket, and the workers need
bert_jax: its sdist (`extra_packages=dist/bert_jax-VERSION.tar.gz`) or an image that has it
(`sdk_container_image=`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
from typing import Iterator, List, Sequence

from bert_jax.data import example_maker, shard_parts
from bert_jax.errors import UserError
from bert_jax.host import library_log, paths

log = logging.getLogger(__name__)

DEFAULT_RUNNER = "FnApiRunner"
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner",
                 "PrismRunner")
# Options by which Beam ships a package to a cluster's workers.
_SHIPPING = ("extra_packages", "extra_package", "setup_file", "requirements_file",
             "sdk_container_image", "worker_harness_container_image")
SHARDS = "shards"  # the subfolder of the parts folder the pipeline writes the shards into


def parse(text: str) -> dict:
    """`key=value,key=value` (a bare `key`: a switch) -> {key: value or None}, in order."""
    items = {}
    for item in text.split(","):
        key, _, value = item.strip().partition("=")
        key = key.strip().lstrip("-")
        if not key:
            raise UserError(f"--beam_pipeline_options {text!r}: an empty option; give "
                            "key=value pairs separated by commas, e.g. runner=FnApiRunner")
        items[key] = value if _ else None
    return items


def pipeline_options(text: str, output_dir: str):
    """The `PipelineOptions` of `--beam_pipeline_options`, checked before anything starts.

    Refuses an option Beam does not know, a cluster runner writing to a local folder, and a cluster
    runner given no way to ship bert_jax to its workers; warns that DirectRunner reaches the
    network."""
    beam = _import_beam()
    items = parse(text)
    items.setdefault("runner", DEFAULT_RUNNER)
    runner = items["runner"] = _runner_name(beam, items["runner"])
    flags = [f"--{key}" if value is None else f"--{key}={value}" for key, value in items.items()]
    with _quiet_import():  # Beam warns of the unknown options this refuses
        options = beam.options.pipeline_options.PipelineOptions(flags)
        known = options.get_all_options(retain_unknown_options=False)
    unknown = [key for key in items if key not in known]
    if unknown:
        raise UserError(f"--beam_pipeline_options: {', '.join(unknown)} is not one of Apache "
                        "Beam's pipeline options (their list: https://beam.apache.org/releases/"
                        "pydoc/current/apache_beam.options.pipeline_options.html)")
    if runner == "DirectRunner":
        log.warning("runner=DirectRunner first tries Beam's Prism runner, which downloads a "
                    "binary from the network; runner=FnApiRunner (the default) runs here with "
                    "no download")
    elif runner not in LOCAL_RUNNERS:
        if not paths.is_remote(output_dir):
            raise UserError(f"--output {output_dir} is a local folder, which the workers of "
                            f"runner={runner} cannot reach: write to a bucket (gs://...)")
        if not any(key in items for key in _SHIPPING):
            raise UserError(f"runner={runner}: the workers need bert_jax; add "
                            "extra_packages=dist/bert_jax-VERSION.tar.gz (built by `python -m "
                            "build --sdist`) or sdk_container_image=IMAGE (an image with "
                            "bert_jax[beam] installed) to --beam_pipeline_options")
    return options


def check_reachable(options, files: Sequence[str]) -> None:
    """Refuses inputs that a cluster runner's workers cannot read.

    Local files, or a corpus by name (`tfds:`) prepared in a local data folder."""
    runner = options.get_all_options()["runner"]
    if runner in LOCAL_RUNNERS:
        return
    local = [f for f in files if not f.startswith("tfds:") and not paths.is_remote(f)]
    if local:
        raise UserError(f"input {local[0]} is a local file, which the workers of runner={runner} "
                        "cannot read: copy the input to a bucket (gs://...) and give its paths")
    data_dir = os.environ.get("TFDS_DATA_DIR", "")
    if len(local) < len(files) and not paths.is_remote(data_dir):
        raise UserError(f"a tfds: input is read by the workers of runner={runner}, which cannot "
                        f"reach the local data folder {data_dir or '~/tensorflow_datasets'}: "
                        "prepare the data set in a bucket and set TFDS_DATA_DIR=gs://...")


def _runner_name(beam, name: str) -> str:
    """A runner's class name, as Beam matches it (any case, "Runner" optional; or a dotted path)."""
    if "." in name:
        return name
    known = {path.rsplit(".", 1)[-1].lower(): path.rsplit(".", 1)[-1]
             for path in beam.options.pipeline_options.StandardOptions.ALL_KNOWN_RUNNERS}
    found = known.get(name.lower()) or known.get(name.lower() + "runner")
    if found is None:
        raise UserError(f"--beam_pipeline_options: runner={name} is not a runner Beam knows "
                        f"(its runners: {', '.join(sorted(known.values()))})")
    return found


def _import_beam():
    try:
        with _quiet_import():
            import apache_beam
    except ImportError as e:
        raise UserError("--beam_pipeline_options needs Apache Beam: pip install "
                        "'bert_jax[beam]'") from e
    return apache_beam


@contextlib.contextmanager
def _quiet_import() -> Iterator[None]:
    """Beam's import warns of optional Google Cloud clients it lacks: not ours to show."""
    loggers = [logging.getLogger(), logging.getLogger("apache_beam")]
    levels = [logger.level for logger in loggers]
    if loggers[0].getEffectiveLevel() > logging.INFO:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def shard_targets(parts_dir: str, output_files: Sequence[str]) -> List[str]:
    """Where the pipeline writes each shard before the launcher renames it into place."""
    return [paths.join(parts_dir, SHARDS, paths.basename(p)) for p in output_files]


def run(options, tasks: Sequence[tuple], init_args: tuple, parts_dir: str,
        output_files: Sequence[str], record_format: str) -> None:
    """Converts `tasks` (`example_maker.convert_file`'s) and writes every shard; waits for the end.

    `init_args`: `example_maker.init_worker`'s, run once per worker. The parts' JSON and the shards
    are left in `parts_dir` (`shard_targets`)."""
    beam = _import_beam()
    paths.makedirs(paths.join(parts_dir, SHARDS))
    targets = shard_targets(parts_dir, output_files)
    pipeline = beam.Pipeline(options=options)
    metas = (pipeline
             | "input files" >> beam.Create(list(tasks))
             | "spread files" >> beam.Reshuffle()
             | "convert" >> beam.ParDo(_convert_files(beam, init_args)))
    _ = (metas
         | "all parts" >> beam.combiners.ToList()
         | "shard pieces" >> beam.FlatMap(_shard_tasks, parts_dir, targets, record_format)
         | "spread shards" >> beam.Reshuffle()
         | "write shards" >> beam.Map(_write_shard, parts_dir))
    stops: List[BaseException] = []
    try:
        with _library_output_to_log(), _stops_kept(stops):
            pipeline.run().wait_until_finish()
    except Exception as e:
        _end_worker_processes()
        if stops:  # Beam reports a stop as whatever failed in its wake
            raise stops[0] from None
        kept = paths.glob(paths.join(parts_dir, "error-*.txt"))
        if kept:  # a worker's UserError: from another process Beam reports only text
            raise UserError(paths.read_text(sorted(kept)[0])) from e
        raise


@contextlib.contextmanager
def _stops_kept(stops: List[BaseException]) -> Iterator[None]:
    """Keeps in `stops` the exception that Ctrl-C or SIGTERM raised (by the handlers in place).

    Raised inside a DoFn running in this process, Beam re-raises it as a RuntimeError or with its
    step's name added; raised while Beam waits, its threads fail in its wake with their own
    errors. Either way the run stopped: the caller raises the stop itself."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def keep(signum, frame):
        handler = previous[signum]
        _end_worker_processes()  # else Beam's cleanup waits for them to finish their work
        try:
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)
        except BaseException as e:
            stops.append(e)
            raise

    for signum in previous:
        signal.signal(signum, keep)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is keep:
                signal.signal(signum, handler)


def _end_worker_processes() -> None:
    """Kills this process's Beam worker processes, if any (multi_processing mode; Linux).

    Beam starts each through a shell, and its own stop kills the shell only: the worker would go on
    converting, orphaned. Found by their parents in /proc."""
    if not os.path.isdir("/proc"):
        return
    children: dict = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        children.setdefault(parent, []).append(int(entry))
    pending, descendants = [os.getpid()], []
    while pending:
        found = children.get(pending.pop(), [])
        descendants += found
        pending += found
    for pid in descendants:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"sdk_worker_main" in f.read():
                    os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


@contextlib.contextmanager
def _kept_errors(parts_dir: str, name: str) -> Iterator[None]:
    """A UserError on a worker is written to `parts_dir` for the launcher (`run`)."""
    try:
        yield
    except UserError as e:
        paths.write_text(paths.join(parts_dir, f"error-{name}.txt"), str(e))
        raise


def _write_shard(task: tuple, parts_dir: str) -> str:
    """Writes one shard (`task`: `_shard_tasks`'); returns its path."""
    target, pieces, record_format = task
    with _kept_errors(parts_dir, paths.basename(target)):
        shard_parts.write_shard(target, pieces, record_format)
    return target


def _convert_files(beam, init_args: tuple):
    """The DoFn converting input files (defined here: Beam is imported only when used)."""

    data_dir = os.environ.get("TFDS_DATA_DIR")  # where a tfds: input lies, for every worker

    class ConvertFiles(beam.DoFn):
        def setup(self):
            if data_dir:
                os.environ["TFDS_DATA_DIR"] = data_dir
            example_maker.init_worker(*init_args)

        def process(self, task):
            index, parts_dir = task[0], task[3]
            with _kept_errors(parts_dir, f"{index:06d}"):
                yield example_maker.convert_file(task)

    return ConvertFiles()


def _shard_tasks(metas: list, parts_dir: str, targets: Sequence[str], record_format: str):
    metas = sorted(metas, key=lambda meta: meta["index"])
    pieces = shard_parts.shard_pieces(metas, parts_dir, len(targets))
    for target, shard_pieces in zip(targets, pieces):
        yield target, shard_pieces, record_format


@contextlib.contextmanager
def _library_output_to_log() -> Iterator[None]:
    """Beam's and its worker processes' logs go to a file while the pipeline runs.

    They are kept with the error if the pipeline fails (`library_log`); shown as they come with
    --verbose. File descriptor 2 is redirected, which the worker processes inherit."""
    if logging.getLogger().getEffectiveLevel() <= logging.INFO:
        yield
        return
    beam_logger = logging.getLogger("apache_beam")
    level = beam_logger.level
    beam_logger.setLevel(logging.ERROR)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException as e:
            _restore(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", "replace")
            if text.strip():
                library_log.keep(e, "Apache Beam's output while the pipeline ran:\n" + text)
            raise
        finally:
            _restore(saved)
            os.close(saved)
            beam_logger.setLevel(level)


def _restore(saved: int) -> None:
    sys.stderr.flush()
    os.dup2(saved, 2)
