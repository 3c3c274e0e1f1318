"""`bert-jax create-data`: BERT-format text -> sharded TFRecords of MLM/NSP examples.

With `--no_next_sentence_prediction` the rows are MLM-only, RoBERTa's FULL-SENTENCES:
[CLS] contiguous sentences [SEP], filled up to max_seq_length, crossing into the next
document of the same input file with a [SEP] between them; all segment 0, no
next_sentence_labels feature (which is how the pipeline tells the two kinds apart).
With `--sentence_order_prediction` the pairs are ALBERT's sentence-order pairs (two
consecutive spans of a document, swapped with p=0.5; see `instances`), labelled in a
`sentence_order_labels` feature (1 = swapped) instead of next_sentence_labels.
short_seq_prob applies to sentence pairs only; each of the dupe_factor copies of an
MLM-only file has the same rows, masked differently.

Each input file is one unit of work, processed by one worker with random
generators derived from (seed, file index, dupe index): the output is
the same for a seed whatever the number of workers, and memory is bounded by
one input file (random next sentences come from other documents of the same
file, so shard big corpora into many files as for the original tool).
Instances of a file are shuffled, then dealt round-robin, in file order, into
the output shards.

Features (BERT's names): input_ids, input_mask, segment_ids (int64 [L]),
next_sentence_labels (int64 [1], 1 = random next; absent in MLM-only files) and, unless
`--dynamic_masking`, masked_lm_positions, masked_lm_ids (int64 [P]) and
masked_lm_weights (float [P]). Files without masks are for dynamic masking;
the pipeline also re-masks statically masked files by restoring their tokens.

Whole-word masking (`--whole_word_masking`) groups `##` pieces into words and
Chinese characters into the words of a segmentation: jieba's
(`--chinese_segmenter`, the default) or a reference file per input file
(`--chinese_ref_file`, BERT-wwm's format: a line of space-separated words per
input line). Its files also carry `word_start` (int64 [L], 1 where a token
starts a word), from which the pipeline's dynamic masking regroups the words.

ERNIE's knowledge masking (`--knowledge_masking entity|phrase`, whole-word masking
implied) masks longer units whole: named entities (jieba.posseg's nr/ns/nt/nz words, or
the leftmost-longest matches of `--entity_file`, one entity per line) or phrases (the
space-separated chunks of `--chinese_ref_file`, words then come from the segmenter).
A unit is the union of the words it touches; words outside units stay units of their
own, so a row mixes entities and words under the same budget. A share
`--knowledge_masking_prob` of the rows is masked by units, the rest by words. Files also
carry `unit_start` (int64 [L]) for the pipeline's dynamic masking.
"""
import contextlib
import itertools
import json
import logging
import multiprocessing
import sys
import threading
import warnings
from typing import List, Optional, Sequence

from bert_jax.data import (
    beam_engine,
    chinese_words,
    corpus,
    data_record,
    example_maker,
    shard_parts,
    tfds_source,
    tfrecord,
)
from bert_jax.data.data_stats import Stats
from bert_jax.data.example_maker import LONG_LINE, examples_from_texts  # noqa: F401 (API)
from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError, check_positive
from bert_jax.host import paths
from bert_jax.host.folders import DATA_FOLDER
from bert_jax.tokenization import chars, load_tokenizer
from bert_jax.tokenization.base import uncovered_text_warning

log = logging.getLogger(__name__)


def shard_paths(output_dir: str, num_shards: int, record_format: str = "tfrecord") -> List[str]:
    """The shards' paths; `record_format`: one of `record_formats.FORMATS`."""
    return [paths.join(output_dir, DATA_FOLDER.shard(i, num_shards, record_format))
            for i in range(num_shards)]


def _cjk_share(path: str, codec: str, lines: int = 1000) -> float:
    if tfds_source.is_tfds(path):
        return 0.0
    """The CJK share of the first `lines` lines of `path` (for the [UNK] warning)."""
    return chars.cjk_share(itertools.islice(corpus.iter_lines(path, corpus.ReadStats(), codec),
                                            lines))


def _check_options(options: DataOptions) -> None:
    """Refuses the flags that would make meaningless rows.

    That includes 0 < masked_lm_prob: at 0 the masker would still mask one token per row."""
    if options.max_seq_length < 5:
        raise UserError("max_seq_length must be at least 5")
    check_positive("--max_predictions_per_seq", options.max_predictions_per_seq)
    check_positive("--dupe_factor", options.dupe_factor)
    for name, low_open in (("masked_lm_prob", True), ("short_seq_prob", False)):
        value = getattr(options, name)
        if not (0 < value <= 1 if low_open else 0 <= value <= 1):
            raise UserError(f"--{name} must be in {'(' if low_open else '['}0, 1], got {value}")


def _size(path: str) -> int:
    """A text file's size; 0 for a tfds piece (not known before it is read)."""
    return 0 if tfds_source.is_tfds(path) else paths.getsize(path)


def _text_files(inputs: Sequence[str], codec: str) -> List[str]:
    """The input files, all text (a TFRecord among them is refused, named), some not blank.

    A corpus by name (`tfds:NAME`) as its pieces (`tfds_source`), after them."""
    by_name = [p for name in inputs if tfds_source.is_tfds(name)
               for p in tfds_source.pieces(name)]
    names = [name for name in inputs if not tfds_source.is_tfds(name)]
    if not names:
        return by_name
    files = corpus.expand_inputs(names)
    for path in files:
        if tfrecord.is_tfrecord_file(path):
            raise UserError(f"{path} is a TFRecord file (pretraining data already), not "
                            "text: give create-data text files, and pretrain on TFRecords")
    corpus.require_text(files, codec)
    return files + by_name


def _check_inputs_apart(files: Sequence[str], output_files: Sequence[str]) -> None:
    """Refuses an input that this run would overwrite or remove.

    A file in the output folder under one of the names create-data writes there (a text file named
    like a shard is read, then removed as an earlier run's shard: `DATA_FOLDER.replaced`)."""
    folders = {paths.dirname(paths.abspath(p)) for p in output_files}
    for path in files:
        full = paths.abspath(path)
        if paths.dirname(full) in folders and DATA_FOLDER.is_replaced(paths.basename(full)):
            raise UserError(f"input {path} is in the output folder under a name create-data "
                            "writes there (it would be overwritten or removed): move it, or "
                            "choose another --output")


def _warn_about(total: Stats, files: Sequence[str], options: DataOptions) -> None:
    """The run's warnings, once each: text the vocabulary does not cover, long lines."""
    warning = uncovered_text_warning(total.unknown_tokens, total.tokens,
                                     f"{len(files)} input file(s)",
                                     _cjk_share(files[0], options.encoding))
    if warning:
        log.warning(warning)
    if total.split_lines:
        log.warning(f"{total.split_lines} line(s) longer than "
                    f"{LONG_LINE * options.max_seq_length} characters were split into "
                    f"{total.split_line_pieces} sentences or chunks "
                    "(BERT's format is a sentence per line, a blank line between documents)")


def _plan(files, references, vocab, do_lower_case, options: DataOptions,
          num_shards: int) -> dict:
    """What the parts are made from and with.

    The data's `record` (`data_record`), whose key tells a finished part of this run from one of
    another (a resumed run keeps the first, remakes the second)."""
    fingerprint = load_tokenizer(vocab, do_lower_case).fingerprint()
    record = data_record.make_record(options, vocab, fingerprint, files, num_shards, references)
    return dict(plan=data_record.record_key(record), num_files=len(files), record=record)


@contextlib.contextmanager
def _main_not_rerun():
    """Keeps spawned workers from re-running the caller's `__main__` script.

    Spawned workers run bert_jax's functions only, but spawn re-runs the caller's `__main__` script
    in each: a script without an `if __name__ == "__main__"` guard (`train_and_evaluate(...)` at its
    top level) would start its job again there. Hiding the script's path while the workers start
    keeps them from running it."""
    main = sys.modules["__main__"]
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__")
             if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _fork_is_safe() -> bool:
    """Forking copies only the calling thread.

    Safe on Linux while this process runs no other thread (but ones marked `fork_safe`, like the
    workdir lock's heartbeat) and has not imported TensorFlow or JAX (whose thread pools a forked
    child would find locked). The create-data command qualifies; a pretraining job converting raw
    text spawns."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    return (sys.platform == "linux" and all(getattr(t, "fork_safe", False) for t in others)
            and not {"tensorflow", "jax"} & sys.modules.keys())


@contextlib.contextmanager
def _workers(num_workers: int, tasks: int, init_args: tuple):
    """A `map` over `num_workers` worker processes (in this one for 1 worker or task).

    The workers are ended on leaving, whatever stopped the run."""
    if num_workers <= 1 or tasks <= 1:
        example_maker.init_worker(*init_args)
        yield map
        return
    processes = min(num_workers, tasks)
    if _fork_is_safe():  # the workers start without importing anything again
        with warnings.catch_warnings():  # Python 3.12+ warns of any thread; see above
            warnings.simplefilter("ignore", DeprecationWarning)
            pool = multiprocessing.get_context("fork").Pool(
                processes, example_maker.init_worker, init_args + (True,))
    else:
        with _main_not_rerun():
            pool = multiprocessing.get_context("spawn").Pool(
                processes, example_maker.init_worker, init_args + (True,))
    try:
        yield pool.imap_unordered
    finally:
        pool.terminate()
        pool.join()


def create_pretraining_data(inputs: Sequence[str], output_files: Sequence[str], vocab: str,
                            options: DataOptions, do_lower_case: Optional[bool] = None,
                            num_workers: int = 1, progress: bool = True,
                            chinese_ref_files: Sequence[str] = (),
                            summary_path: Optional[str] = None, parts_dir: Optional[str] = None,
                            host_index: int = 0, num_hosts: int = 1,
                            beam_options: Optional[str] = None) -> Stats:
    """Writes `output_files` (one per shard) and returns the summed Stats.

    Each worker converts whole input files into parts and then assembles whole shards
    (`shard_parts`): the bytes are the same for a seed whatever `num_workers`.
    `summary_path`: where to write summary.json once the shards are in place; the
    record of what they were made with (`data_record`) goes beside it, last.
    `parts_dir`: a folder that keeps finished parts, so a stopped run resumes there
    (default: a temporary folder, removed). With `num_hosts` > 1 this process converts
    the files of index % num_hosts == host_index into `parts_dir` and writes no shard:
    `assemble` makes them once every host is done. `beam_options`: run the conversion as an
    Apache Beam pipeline (`beam_engine`) with these `key=value,...` options; the same shards.
    The shards' format is their names' extension (`shard_paths`).
    `chinese_ref_files`: reference segmentations for whole-word masking, one per
    input file in the sorted order of the expanded inputs. Fails at once
    (FileNotFoundError / TokenizerError / UserError) for a missing input,
    vocabulary or reference file, and for bytes that are not UTF-8 (`bert_jax.host.encoding`);
    empty files and long lines are counted; a reference line that does not spell its
    input line fails.
    """
    _check_options(options)
    files = _text_files(inputs, options.encoding)
    _check_inputs_apart(files, output_files)
    load_tokenizer(vocab, do_lower_case)  # fail before starting workers
    chinese_words.make_segmenter(options.chinese_segmenter)
    references = _reference_files(chinese_ref_files, files, options)
    if not 0 <= host_index < num_hosts:
        raise UserError(f"--host_index {host_index} is not in [0, --num_hosts {num_hosts})")
    if num_hosts > 1 and parts_dir is None:
        raise ValueError("a run on several hosts writes parts into a shared parts_dir")
    beam = None
    if beam_options is not None:
        beam = beam_engine.pipeline_options(beam_options,
                                            paths.dirname(paths.abspath(output_files[0])))
        beam_engine.check_reachable(beam, files)
        corpus.check_starts([f for f in files if not tfds_source.is_tfds(f)], options.encoding)
    plan = _plan(files, references, vocab, do_lower_case, options, len(output_files))
    made = sorted({paths.dirname(paths.abspath(p)) for p in output_files
                   if not paths.exists(paths.dirname(paths.abspath(p)))})
    keep_parts = parts_dir is not None
    if parts_dir is None:  # hidden: a killed run leaves nothing a glob could take as data
        parts_dir = paths.temporary_sibling(output_files[0])
    for directory in made + [parts_dir]:
        paths.makedirs(directory)
    done = shard_parts.finished_parts(parts_dir, plan["plan"])
    tasks = [(index, path, references[index] if references else None, parts_dir,
              len(output_files), plan)
             for index, path in enumerate(files)
             if index % num_hosts == host_index and index not in done]
    tasks.sort(key=lambda task: -_size(task[1]))  # longest first: the workers end together
    init_args, failed = (vocab, do_lower_case, options), True
    try:
        if beam is not None:
            total = _convert_with_beam(beam, tasks, init_args, done, plan, files, parts_dir,
                                       output_files, summary_path)
        else:
            total = _convert_here(tasks, done, files, parts_dir, output_files, init_args,
                                  num_workers, progress, summary_path, host_index, num_hosts)
        failed = False
    finally:
        if not keep_parts:
            paths.rmtree(parts_dir, missing_ok=True)
        if failed:
            _remove_outputs([], made)
    return total


def _reference_files(chinese_ref_files: Sequence[str], files: Sequence[str],
                     options: DataOptions) -> List[str]:
    """The Chinese reference segmentations, one per input file, checked against the options."""
    references = corpus.expand_inputs(chinese_ref_files) if chinese_ref_files else []
    if references and not options.whole_units:
        raise UserError("a Chinese reference segmentation is for whole-word masking: "
                        "add --whole_word_masking")
    example_maker.check_knowledge_masking(options, bool(references))
    if references and len(references) != len(files):
        raise UserError(f"{len(references)} reference files for {len(files)} input files: "
                        "give one per input file, in the inputs' sorted order")
    return references


def _convert_with_beam(beam, tasks, init_args, done, plan, files, parts_dir, output_files,
                       summary_path) -> Stats:
    """The conversion as a Beam pipeline, then the shards placed and summarised as here."""
    beam_engine.run(beam, tasks, init_args, parts_dir, output_files, _record_format(output_files))
    _, _, options = init_args
    done.update(shard_parts.finished_parts(parts_dir, plan["plan"]))
    total = _total([done[i] for i in range(len(files))])
    _warn_about(total, files, options)
    _require_rows(total, len(files))
    _place(beam_engine.shard_targets(parts_dir, output_files), output_files)
    _write_summary(total, [done[0]], output_files, summary_path)
    return total


def _record_format(output_files: Sequence[str]) -> str:
    return output_files[0].rsplit(".", 1)[-1]


def _convert_here(tasks, done: dict, files: Sequence[str], parts_dir: str,
                  output_files: Sequence[str], init_args: tuple, num_workers: int, progress: bool,
                  summary_path: Optional[str], host_index: int, num_hosts: int) -> Stats:
    """The local engine: `tasks` converted by `num_workers` processes, then the shards assembled."""
    from tqdm import tqdm
    bar = None
    try:
        with _workers(num_workers, len(tasks), init_args) as run_map:
            # after the workers start: tqdm's monitor thread would keep them from forking
            bar = tqdm(total=sum(_size(task[1]) for task in tasks), unit="B", unit_scale=True,
                       desc="create-data", disable=not progress, file=sys.stderr)
            for meta in run_map(example_maker.convert_file, tasks):
                done[meta["index"]] = meta
                bar.update(_size(files[meta["index"]]))
            bar.close()
            mine = [done[i] for i in range(len(files)) if i % num_hosts == host_index]
            total = _total(mine)
            _warn_about(total, files, init_args[2])
            if num_hosts == 1:
                _assemble(mine, parts_dir, output_files, run_map, summary_path)
    finally:
        if bar is not None:
            bar.close()
    return total


def _total(metas: Sequence[dict]) -> Stats:
    total = Stats()
    for meta in metas:
        total += Stats.from_json(meta["stats"])
    return total


def _require_rows(total: Stats, num_files: int) -> None:
    """Refuses a data set with no row (it would only fail later)."""
    if not total.instances:
        raise UserError(
            f"no pretraining examples from {num_files} input file(s): {total.documents} "
            f"documents, {total.sentences} sentences, {total.empty_files} empty file(s); "
            "the input needs text in BERT's "
            "format (a sentence per line, a blank line between documents)")


def _assemble(metas: Sequence[dict], parts_dir: str, output_files: Sequence[str], run_map,
              summary_path: Optional[str]) -> None:
    """The shards from the parts (`metas`, in input order), renamed into place together.

    Then summary.json and the data's record beside it."""
    total = _total(metas)
    _require_rows(total, len(metas))
    pieces = shard_parts.shard_pieces(metas, parts_dir, len(output_files))
    record_format = _record_format(output_files)
    temporary = []
    try:
        for tmp in run_map(shard_parts.assemble_shard,
                           [(path, shard, record_format)
                            for path, shard in zip(output_files, pieces)]):
            temporary.append(tmp)
        _place([next(t for t in temporary
                     if paths.basename(t).startswith(f".tmp-{paths.basename(path)}-"))
                for path in output_files], output_files)
        temporary.clear()
    finally:
        for tmp in temporary:
            paths.remove(tmp)
    _write_summary(total, metas, output_files, summary_path)


def _place(written: Sequence[str], output_files: Sequence[str]) -> None:
    """Renames each written shard to its final name, in order (a stop leaves the rest removable)."""
    for tmp, path in zip(written, output_files):
        paths.move(tmp, path)


def _write_summary(total: Stats, metas: Sequence[dict], output_files: Sequence[str],
                   summary_path: Optional[str]) -> None:
    """summary.json, then the data's record beside it (last: it marks the folder complete)."""
    if summary_path:
        summary = dict(total.summary(), output_files=list(output_files))
        paths.write_text(summary_path, json.dumps(summary, indent=2))
        data_record.write_record(paths.dirname(summary_path),
                                 data_record.record_of_part(metas[0]))


def assemble(output_dir: str, num_shards: int, num_workers: int = 1) -> Stats:
    """Assembles the parts that `num_hosts` runs wrote into OUTPUT/parts.

    Every file's part must be there. They become the shards, summary.json and the data's record,
    then the parts are removed."""
    parts_dir = paths.join(output_dir, DATA_FOLDER.parts)
    metas = [json.loads(paths.read_text(p))
             for p in paths.glob(paths.join(parts_dir, "part-*.json"))]
    if not metas:
        raise UserError(f"no parts in {parts_dir}: run create-data with --host_index and "
                        "--num_hosts on each host first")
    plans = {m["plan"] for m in metas}
    if len(plans) > 1:
        raise UserError(f"{parts_dir} holds parts of {len(plans)} different runs (other "
                        "inputs or options): rerun the hosts with the same command")
    metas.sort(key=lambda m: m["index"])
    missing = sorted(set(range(metas[0]["num_files"])) - {m["index"] for m in metas})
    if missing:
        raise UserError(f"{len(missing)} of {metas[0]['num_files']} input files are not "
                        f"converted yet (indexes {missing[:5]}...): wait for every host "
                        "to finish, then assemble")
    if len(metas[0]["counts"]) != num_shards:
        raise UserError(f"the parts were made for {len(metas[0]['counts'])} shards: "
                        f"give --num_shards {len(metas[0]['counts'])}")
    output_files = shard_paths(output_dir, num_shards)
    tokenizer = data_record.record_of_part(metas[0])["tokenizer"]
    with _workers(num_workers, num_shards, (tokenizer, None, DataOptions())) as run_map:
        _assemble(metas, parts_dir, output_files, run_map,
                  paths.join(output_dir, DATA_FOLDER.summary))
    paths.rmtree(parts_dir)
    return _total(metas)


def _remove_outputs(output_files: Sequence[str], made: Sequence[str]) -> None:
    """Removes the shards of a failed run and the directories it made."""
    for path in output_files:
        if paths.exists(path):
            paths.remove(path)
    for directory in made:
        if paths.exists(directory) and not paths.listdir(directory):
            paths.rmtree(directory)


def remove_stale_shards(output_dir: str, output_files: Sequence[str]) -> List[str]:
    """Removes the shards an earlier run with another --num_shards or --format left in `output_dir`.

    These are the `pretrain-*-of-*` shards that this run did not write: a glob over the directory
    would train on both sets. Returns their paths."""
    keep = {paths.abspath(p) for p in output_files}
    stale = [p for pattern in (DATA_FOLDER.shards, DATA_FOLDER.array_record_shards)
             for p in paths.glob(paths.join(output_dir, pattern))
             if paths.abspath(p) not in keep]
    for path in stale:
        paths.remove(path)
    return stale


def remove_stale_temporaries(output_dir: str) -> List[str]:
    """Removes the hidden `.tmp-*` files and folders a stopped run left in `output_dir`.

    Call it holding the folder's lock: a running run's are not stale. Returns them."""
    stale = paths.glob(paths.join(output_dir, ".tmp-*")) if paths.isdir(output_dir) else []
    for path in stale:
        if paths.isdir(path):
            paths.rmtree(path, missing_ok=True)
        else:
            paths.remove(path)
    return stale
