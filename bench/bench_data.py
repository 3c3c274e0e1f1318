"""Data throughput on the embedded corpus: create-data (MB of text/s) and the
input pipeline (examples/s) with static and dynamic masking.

    python bench/bench_data.py [--dupe_factor 1] [--workers 2] [--batch 32] [--steps 300]
"""
import argparse
import itertools
import os
import tempfile
import time

import tensorflow as tf  # noqa: F401  (imported up front so no timing includes it)

from bert_jax.data import corpus
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.pipeline import PipelineOptions, make_pretrain_iterator
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer


def bench_create_data(out_dir: str, static: bool, args) -> float:
    options = cpd.Options(dupe_factor=args.dupe_factor, static_masking=static,
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
    options = PipelineOptions(per_host_batch_size=args.batch, max_seq_length=args.max_seq_length,
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


def main():
    parser = argparse.ArgumentParser(description=__doc__)
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
        bench_pipeline(os.path.join(static_dir, "*.tfrecord"), "static masks", args)
        bench_pipeline(os.path.join(plain_dir, "*.tfrecord"), "dynamic masks", args,
                       dynamic_masking=True)
        bench_pipeline(os.path.join(plain_dir, "*.tfrecord"), "dynamic whole-word masks", args,
                       dynamic_masking=True, whole_word_masking=True)
        bench_pipeline(os.path.join(plain_dir, "*.tfrecord"), "dynamic masks + packing", args,
                       dynamic_masking=True, pack=True)


if __name__ == "__main__":
    main()
