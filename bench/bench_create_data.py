"""create-data's scaling with workers, side by side on the same files: wall time, CPU
time and MB of text per second per worker for 1 and 2 workers (byte-identical outputs
checked), the Apache Beam engine beside them where Beam is installed (in-process, and two
worker processes: the same bytes), then more workers simulated from the per-file times of
the 1-worker run (each worker takes the next file, longest first, as the pool does;
assembly measured), and
the extrapolation to a 20 GB corpus on a 64-core host.

    python bench/bench_create_data.py [--files 8] [--dupe_factor 5] [--max_seq_length 128]
        [--repeats 2] [--input 'PATTERN']

--input: text files to split into --files parts (default: the embedded corpus, ~7 MB).
Run it on a quiet machine: the ratio is what it measures.
"""
import glob
import gzip
import hashlib
import heapq
import importlib.util
import os
import resource
import shutil
import statistics
import tempfile
import time

from bert_jax import flags
from bert_jax.data import corpus, example_maker
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.tokenization import DEFAULT_VOCAB


def split_corpus(pattern: str, parts: int, folder: str) -> list[str]:
    """The documents of `pattern` dealt into `parts` text files of about equal size."""
    lines = []
    for path in sorted(glob.glob(pattern)):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            lines += f.readlines()
    documents, current = [], []
    for line in lines:
        current.append(line)
        if not line.strip():
            documents.append("".join(current))
            current = []
    documents.append("".join(current))
    files = [os.path.join(folder, f"part{i:02d}.txt") for i in range(parts)]
    handles = [open(f, "w", encoding="utf-8") for f in files]
    sizes = [0] * parts
    for document in documents:
        i = sizes.index(min(sizes))
        handles[i].write(document)
        sizes[i] += len(document)
    for handle in handles:
        handle.close()
    return files


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the workers)."""
    me, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                        resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


BEAM = {1: "runner=FnApiRunner",
        2: "runner=FnApiRunner,direct_running_mode=multi_processing,direct_num_workers=2"}


def run(files, out_dir, options, workers, beam=False):
    """(wall, CPU, output digest, seconds spent in each file: with 1 worker, in this
    process, so measured within the same run). `beam`: Beam's engine (`BEAM[workers]`)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    times, convert = [], example_maker.convert_file

    def timed(task):
        start = time.perf_counter()
        meta = convert(task)
        times.append(time.perf_counter() - start)
        return meta

    example_maker.convert_file = timed if workers == 1 and not beam else convert
    wall, cpu = time.perf_counter(), cpu_seconds()
    try:
        cpd.create_pretraining_data(files, cpd.shard_paths(out_dir, 8), DEFAULT_VOCAB, options,
                                    num_workers=workers, progress=False,
                                    beam_options=BEAM[workers] if beam else None)
    finally:
        example_maker.convert_file = convert
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    digest = hashlib.sha256()
    for shard in cpd.shard_paths(out_dir, 8):
        with open(shard, "rb") as f:
            digest.update(f.read())
    return wall, cpu, digest.hexdigest(), times


def simulated_wall(times: list[float], workers: int, start_up: float) -> float:
    """The pool's wall time: each worker takes the next file (longest first)."""
    busy = [start_up] * workers
    heapq.heapify(busy)
    for t in sorted(times, reverse=True):
        heapq.heappush(busy, heapq.heappop(busy) + t)
    return max(busy)


def main() -> None:
    parser = flags.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--input", default=corpus.DEFAULT_CORPUS)
    args = parser.parse_args()
    options = DataOptions(dupe_factor=args.dupe_factor, max_seq_length=args.max_seq_length,
                          dynamic_masking=False)
    with tempfile.TemporaryDirectory() as tmp:
        files = split_corpus(args.input, args.files, tmp)
        mb = sum(os.path.getsize(f) for f in files) / 1e6
        print(f"{len(files)} files, {mb:.1f} MB of text, dupe_factor {args.dupe_factor}, "
              f"seq {args.max_seq_length}, {os.cpu_count()} cores")
        results, beam = {1: [], 2: []}, {1: [], 2: []}
        with_beam = importlib.util.find_spec("apache_beam") is not None
        for _ in range(args.repeats):  # interleaved: all see the same machine load
            for workers in (1, 2):
                results[workers].append(run(files, os.path.join(tmp, f"out{workers}"),
                                            options, workers))
                if with_beam:
                    beam[workers].append(run(files, os.path.join(tmp, f"beam{workers}"),
                                             options, workers, beam=True))
        digests = {r[2] for rs in (*results.values(), *beam.values()) for r in rs}
        for workers, rs in results.items():
            wall = min(r[0] for r in rs)
            cpu = min(r[1] for r in rs)
            print(f"  {workers} worker(s): {wall:.1f} s wall, {cpu:.1f} s CPU, "
                  f"{mb / wall:.2f} MB/s, {mb / wall / workers:.2f} MB/s per worker")
        speedup = min(r[0] for r in results[1]) / min(r[0] for r in results[2])
        pairs = sorted(a[0] / b[0] for a, b in zip(results[1], results[2]))
        print(f"  2 workers / 1 worker: {speedup:.2f}x best against best; each repeat's pair "
              f"{', '.join(f'{r:.2f}' for r in pairs)} (median "
              f"{statistics.median(pairs):.2f}x); outputs "
              f"{'byte-identical' if len(digests) == 1 else 'DIFFER'}")

        for workers, rs in beam.items() if with_beam else ():
            wall = min(r[0] for r in rs)
            local_wall = min(r[0] for r in results[workers])
            print(f"  Beam, {BEAM[workers]}: {wall:.1f} s wall, {mb / wall / workers:.2f} MB/s "
                  f"per core, {local_wall / wall:.2f}x the local engine with {workers} "
                  f"worker(s); {workers * wall / 3600 / (mb / 1e3):.2f} core-hours per GB "
                  "of text at that rate")
        if not with_beam:
            print("  Beam: not installed (pip install 'bert_jax[beam]')")

        one, _, _, times = min(results[1])  # the fastest 1-worker run, its files' times
        rest = one - sum(times)  # start-up, assembly, summary: outside the files
        print(f"  per file (one worker): {min(times):.2f}-{max(times):.2f} s; "
              f"outside the files {rest:.1f} s")
        for workers in (4, 8, 16, 64):
            # past one file per worker, the same text split into as many files as workers
            wall = rest + (simulated_wall(times, workers, 0.0) if workers <= len(files)
                           else sum(times) / workers)
            print(f"  {workers} workers (simulated, {max(workers, len(files))} files): "
                  f"{wall:.1f} s, {one / wall:.1f}x one worker")
        rate = mb / sum(times)  # MB of text per second per worker on the files alone
        shards = cpd.shard_paths(os.path.join(tmp, "out1"), 8)
        per_text_mb = sum(os.path.getsize(p) for p in shards) / 1e6 / mb
        corpus_mb, cores, disk_mb_s = 20_000, 64, 500  # disk_mb_s: an assumed sustained write
        convert_h = corpus_mb / (rate * cores) / 3600
        records_gb = corpus_mb * per_text_mb / 1e3
        write_h = 2 * records_gb * 1e3 / disk_mb_s / 3600  # parts, then shards
        print(f"  records: {per_text_mb:.1f} MB per MB of text")
        print(f"  20 GB of text on a {cores}-core host (at least {cores} files, dupe_factor "
              f"{args.dupe_factor}, seq {args.max_seq_length}): converting at {rate:.2f} MB/s "
              f"per worker about {convert_h:.2f} h of CPU-bound work; {records_gb:.0f} GB of "
              f"records written twice (parts, then shards) at an assumed {disk_mb_s} MB/s "
              f"disk about {write_h:.2f} h: the disk, not the cores, bounds it there")


if __name__ == "__main__":
    main()
