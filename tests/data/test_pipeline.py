"""The pretraining pipeline through both readers (Grain, tf.data).

Contents, dynamic masking rules, host split, exact resume, packing; the readers agree, and
ArrayRecord shards read as TFRecord ones."""
import collections
import dataclasses
import glob
import gzip
import hashlib
import itertools
import json
import os

import numpy as np
import pytest

from bert_jax.data import corpus, masking, record_formats, record_sources, tfrecord
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import make_pretrain_iterator
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer

from helpers.records import (
    MAX_PRED,
    MAX_SEQ,
    assert_bert_masking,
    assert_whole_words,
    mask_statistics,
    read_records,
)

KEYS = {"input_ids": np.int32, "input_mask": np.int32, "segment_ids": np.int32,
        "masked_lm_positions": np.int32, "masked_lm_ids": np.int32,
        "masked_lm_weights": np.float32, "next_sentence_labels": np.int32}
BATCH = 16


@pytest.fixture(scope="module", params=["grain", pytest.param("tf.data", marks=pytest.mark.tf)])
def reader(request):
    """The input_pipeline a test reads through."""
    return request.param


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DEFAULT_VOCAB)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The same instances written twice: statically masked and unmasked, 3 shards each."""
    shard = sorted(glob.glob(corpus.DEFAULT_CORPUS))[3]
    out = {}
    for name, static in (("static", True), ("plain", False)):
        directory = tmp_path_factory.mktemp(name)
        files = cpd.shard_paths(str(directory), 3)
        options = DataOptions(dupe_factor=1, dynamic_masking=not static)
        cpd.create_pretraining_data([shard], files, DEFAULT_VOCAB, options, progress=False)
        out[name] = str(directory / "*.tfrecord")
    return out


def _iterator(pattern, tok, **kwargs):
    args = dict(per_host_batch_size=BATCH, max_seq_length=MAX_SEQ,
                max_predictions_per_seq=MAX_PRED, tokenizer=tok, seed=3, process_index=0,
                process_count=1, shuffle_buffer=500, input_pipeline="grain")
    args.update(kwargs)
    fields = {f.name for f in dataclasses.fields(DataOptions)}
    options = DataOptions(**{k: v for k, v in args.items() if k in fields})
    return make_pretrain_iterator([pattern], options,
                                  **{k: v for k, v in args.items() if k not in fields})


def _concat(batches):
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def _row_set_keys(ids):
    return list(map(bytes, np.ascontiguousarray(ids, np.int32)))


def _row_set(ids):
    return sorted(_row_set_keys(ids))


def test_static_epoch_has_every_record_once(data, tok, reader):
    records = read_records(glob.glob(data["static"]))
    batches = list(_iterator(data["static"], tok, input_pipeline=reader, repeat=False))
    for batch in batches:
        assert set(batch) == set(KEYS)
        for key, dtype in KEYS.items():
            assert batch[key].dtype == dtype and batch[key].shape[0] == BATCH
    epoch = _concat(batches)
    real = epoch["input_mask"][:, 0] == 1
    assert real.sum() == len(records["input_ids"]) > 1000
    assert _row_set(epoch["input_ids"][real]) == _row_set(records["input_ids"])


def test_dynamic_masking_follows_bert_rules(data, tok, reader):
    plain = read_records(glob.glob(data["plain"]))
    batches = list(itertools.islice(_iterator(data["plain"], tok, input_pipeline=reader,
                                              dynamic_masking=True), 150))
    rows = _concat(batches)
    assert_bert_masking(rows, tok)
    assert abs(rows["next_sentence_labels"].mean() - 0.5) < 0.04
    restored = masking.unmask(rows["input_ids"], rows["masked_lm_positions"],
                              rows["masked_lm_ids"], rows["masked_lm_weights"])
    assert set(_row_set(restored)) <= set(_row_set(plain["input_ids"]))


def test_dynamic_masks_change_every_epoch_and_static_files_are_unmasked(data, tok, reader):
    plain = read_records(glob.glob(data["plain"]))
    n = len(plain["input_ids"])
    same = dict(input_pipeline=reader, dynamic_masking=True, shuffle_buffer=1)
    from_static = _iterator(data["static"], tok, **same)
    from_plain = _iterator(data["plain"], tok, **same)
    steps = 2 * (n // BATCH) + 2
    a = _concat(list(itertools.islice(from_static, steps)))
    b = _concat(list(itertools.islice(from_plain, steps)))
    for key in KEYS:  # same instances, same keys -> the same masks from either file kind
        np.testing.assert_array_equal(a[key], b[key])
    restored = masking.unmask(a["input_ids"], a["masked_lm_positions"], a["masked_lm_ids"],
                              a["masked_lm_weights"])
    assert _row_set(restored[:n]) == _row_set(restored[n:2 * n])  # each epoch: every record
    masked_by_row = [dict(zip(_row_set_keys(restored[e * n:(e + 1) * n]),
                              map(bytes, a["input_ids"][e * n:(e + 1) * n]))) for e in (0, 1)]
    changed = [masked_by_row[0][key] != masked_by_row[1][key] for key in masked_by_row[0]]
    assert np.mean(changed) > 0.9  # fresh masks in epoch 2


def test_dynamic_whole_word_masking(data, tok, reader):
    it = _iterator(data["plain"], tok, input_pipeline=reader, dynamic_masking=True,
                   whole_word_masking=True)
    rows = _concat(list(itertools.islice(it, 40)))
    assert_whole_words(rows, tok)
    assert abs(mask_statistics(rows, tok)["masked_share"] - 0.15) < 0.01


@pytest.mark.parametrize("pack", [False, True])
def test_exact_resume(data, tok, reader, pack):
    n = len(read_records(glob.glob(data["plain"]))["input_ids"])
    make = lambda **kw: _iterator(data["plain"], tok, input_pipeline=reader,
                                  dynamic_masking=True, packing=pack, **kw)
    reference = make()
    steps_to_cross_epoch = n // BATCH + 3
    expected = list(itertools.islice(reference, steps_to_cross_epoch + 3))
    for stop in (5, steps_to_cross_epoch - 4):
        first = make()
        for _ in range(stop):
            next(first)
        state = json.loads(json.dumps(first.get_state()))
        resumed = make(state=state)
        for step in range(stop, stop + 7):
            got = next(resumed)
            for key in expected[step]:
                np.testing.assert_array_equal(got[key], expected[step][key],
                                              err_msg=f"{key} at step {step}")


@pytest.mark.parametrize("count", [2, 4])
def test_hosts_split_the_data(data, tok, reader, count):
    """2 hosts split 3 files; 4 hosts (more than files) split records."""
    records = read_records(glob.glob(data["static"]))
    seen = []
    for index in range(count):
        epoch = _concat(list(_iterator(data["static"], tok, input_pipeline=reader,
                                       repeat=False, process_index=index,
                                       process_count=count)))
        seen.append(_row_set(epoch["input_ids"][epoch["input_mask"][:, 0] == 1]))
    union = sorted(itertools.chain(*seen))
    assert union == _row_set(records["input_ids"])
    assert all(len(s) > 0 for s in seen)


def test_eval_split_is_held_out(data, tok, reader):
    train = _concat(list(_iterator(data["static"], tok, input_pipeline=reader, repeat=False,
                                   eval_fraction=0.1)))
    evals = list(_iterator(data["static"], tok, input_pipeline=reader, split="eval",
                           eval_fraction=0.1))
    held = _concat(evals)
    train_rows = set(_row_set(train["input_ids"][train["input_mask"][:, 0] == 1]))
    eval_rows = _row_set(held["input_ids"][held["input_mask"][:, 0] == 1])
    total = len(read_records(glob.glob(data["static"]))["input_ids"])
    assert 0.06 * total < len(eval_rows) < 0.14 * total
    assert len(train_rows) + len(eval_rows) == total
    assert not train_rows & set(eval_rows)
    again = _concat(list(_iterator(data["static"], tok, input_pipeline=reader, split="eval",
                                   eval_fraction=0.1)))
    np.testing.assert_array_equal(again["input_ids"], held["input_ids"])  # deterministic


def test_packing_layout(tmp_path, tok, reader):
    shard = sorted(glob.glob(corpus.DEFAULT_CORPUS))[3]
    files = cpd.shard_paths(str(tmp_path), 1)
    cpd.create_pretraining_data([shard], files, DEFAULT_VOCAB,
                                DataOptions(dupe_factor=1, short_seq_prob=0.6), progress=False)
    unpacked = _concat(list(_iterator(files[0], tok, input_pipeline=reader, repeat=False)))
    packed = _concat(list(_iterator(files[0], tok, input_pipeline=reader, repeat=False,
                                    packing=True)))
    assert packed["input_mask"].sum() == unpacked["input_mask"].sum()
    assert packed["next_sentence_weights"].sum() == (unpacked["input_mask"][:, 0] == 1).sum()
    assert len(packed["input_ids"]) < len(unpacked["input_ids"])
    assert packed["masked_lm_weights"].sum() == unpacked["masked_lm_weights"].sum()
    for row in range(len(packed["input_ids"])):
        example_ids, positions = packed["example_ids"][row], packed["position_ids"][row]
        n = packed["input_mask"][row].sum()
        assert (np.diff(example_ids[:n]) >= 0).all() and (example_ids[n:] == 0).all()
        starts = np.flatnonzero(positions[:n] == 0)
        k = int(packed["next_sentence_weights"][row].sum())
        assert len(starts) == k == example_ids[:n].max(initial=0)
        np.testing.assert_array_equal(packed["next_sentence_positions"][row][:k], starts)
        assert (packed["input_ids"][row][starts] == tok.cls_id).all()
        w = packed["masked_lm_weights"][row] > 0
        assert (packed["masked_lm_positions"][row][w] < n).all()


def test_clear_errors(data, tok, reader, tmp_path):
    with pytest.raises(ValueError, match="no static masks"):
        next(_iterator(data["plain"], tok, input_pipeline=reader))
    with pytest.raises(FileNotFoundError):
        _iterator(str(tmp_path / "*.tfrecord"), tok, input_pipeline=reader)
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="no train records"):
        next(_iterator(str(empty), tok, input_pipeline=reader))


@pytest.fixture(scope="module")
def short_rows(tmp_path_factory):
    """Unmasked records, many of them short (short_seq_prob 0.6): packing fills rows."""
    shard = sorted(glob.glob(corpus.DEFAULT_CORPUS))[3]
    files = cpd.shard_paths(str(tmp_path_factory.mktemp("short")), 2)
    cpd.create_pretraining_data([shard], files, DEFAULT_VOCAB,
                                DataOptions(dupe_factor=1, short_seq_prob=0.6,
                                            dynamic_masking=True), progress=False)
    return files[0].replace("-00000-of-00002", "-*")


BATCH_DIGESTS = {  # taken from the tf.data pipeline every earlier run used (at ad34b08)
    (False, False): "c0f6ee56bc404aa35843c1a6017e9bc341d38a1d4892fef31fd56619c04d3722",
    (True, False): "fdb661e9cace9a83f01309b039c08ef6f9c01fa22b36a8757a7d344734a39b28",
    (False, True): "13a19350cd52d5408a45e757c2f285e87b6461a19885c407e7865521056913cf",
    (True, True): "4e872175623be155f381d7e5a57a56e28f28abc1f096dbb098ba583d733223a1",
}


@pytest.mark.tf
@pytest.mark.parametrize("pack,whole_word", sorted(BATCH_DIGESTS))
def test_the_batches_of_a_seed_are_those_every_earlier_run_had(short_rows, tok, pack,
                                                               whole_word):
    """A faster pipeline must deliver the same batches: dynamic masks, packing and the
    resume state, compared with digests of the implementation they replace."""
    iterator = _iterator(short_rows, tok, dynamic_masking=True, packing=pack,
                         whole_word_masking=whole_word, per_host_batch_size=32,
                         input_pipeline="tf.data")
    digest = hashlib.sha256()
    for batch in itertools.islice(iterator, 12):
        for key in sorted(batch):
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(batch[key]).tobytes())
    digest.update(json.dumps(iterator.get_state(), sort_keys=True).encode())
    iterator.close()
    assert digest.hexdigest() == BATCH_DIGESTS[(pack, whole_word)]


@pytest.fixture(scope="module")
def few_rows(tmp_path_factory):
    """A few dozen unmasked records in 2 files: a dozen batches of 32 span many epochs."""
    folder = tmp_path_factory.mktemp("few")
    with gzip.open(sorted(glob.glob(corpus.DEFAULT_CORPUS))[3], "rt", encoding="utf-8") as f:
        (folder / "few.txt").write_text("".join(itertools.islice(f, 300)), encoding="utf-8")
    files = cpd.shard_paths(str(folder / "data"), 2)
    cpd.create_pretraining_data([str(folder / "few.txt")], files, DEFAULT_VOCAB,
                                DataOptions(dupe_factor=1, short_seq_prob=0.6,
                                            dynamic_masking=True), progress=False)
    return str(folder / "data" / "*.tfrecord")


EPOCHS_DIGESTS = {  # from the tf.data pipeline at ad34b08
    False: "ae68fe6d906f469f34a7a00b66869881ab0c61a5dd8874bb6d5f6a14a5c8cd1e",
    True: "ea3563ebc5331a07112710d1c94a6d74279dd8ade7a74f1bc2f26a0312523564",
}


@pytest.mark.tf
@pytest.mark.parametrize("pack", [False, True])
def test_batches_across_epochs_are_those_every_earlier_run_had(few_rows, tok, pack):
    iterator = _iterator(few_rows, tok, dynamic_masking=True, packing=pack,
                         per_host_batch_size=32, input_pipeline="tf.data")
    digest = hashlib.sha256()
    for batch in itertools.islice(iterator, 12):
        for key in sorted(batch):
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(batch[key]).tobytes())
    state = iterator.get_state()
    iterator.close()
    assert state["epoch"] >= 3  # the batches did cross epochs
    digest.update(json.dumps(state, sort_keys=True).encode())
    assert digest.hexdigest() == EPOCHS_DIGESTS[pack]


def _digest(iterator, steps=12):
    digest = hashlib.sha256()
    for batch in itertools.islice(iterator, steps):
        for key in sorted(batch):
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(batch[key]).tobytes())
    digest.update(json.dumps(iterator.get_state(), sort_keys=True).encode())
    iterator.close()
    return digest.hexdigest()


GRAIN_DIGESTS = {  # from the first released Grain reader (its own vectorised shuffle), with 1,
    # 3 and 4 threads: a run resumed by a later release continues as it began
    (False, False): "740cdc4237ba4b9f1a3ab28bd0997158dee3654cf39b0f37afe3712a988a3693",
    (True, False): "8fb4f2265104bd7f16a46934a6d3a47eb5d3e344bc3830086dbfc61b6d3d1763",
    (False, True): "91d202cc69932eda850d25c360e91f843c6a55b707bfba6b5a6a1995ddd64be7",
    (True, True): "630bf227eb52ae7080c5775d139fd85131a5b15bca8b6d04e12ac9659498d7ef",
}


@pytest.mark.parametrize("pack,whole_word", sorted(GRAIN_DIGESTS))
def test_grain_batches_of_a_seed_stay_those_of_its_first_release(short_rows, tok, pack,
                                                                 whole_word):
    """Grain's order (a global shuffle), masks, packing and state over 12 batches, compared with
    digests taken when the reader was written (the same with any number of threads)."""
    iterator = _iterator(short_rows, tok, dynamic_masking=True, packing=pack,
                         whole_word_masking=whole_word, per_host_batch_size=32, input_threads=3)
    assert _digest(iterator) == GRAIN_DIGESTS[(pack, whole_word)]


def _epoch(pattern, tok, reader, **kwargs):
    """Every real row of one unrepeated epoch, as {row bytes of every key: count}."""
    rows = _concat(list(_iterator(pattern, tok, input_pipeline=reader, repeat=False, **kwargs)))
    real = rows["input_mask"][:, 0] == 1
    keys = sorted(rows)
    return collections.Counter(
        b"".join(np.ascontiguousarray(rows[k][i]).tobytes() for k in keys)
        for i in np.flatnonzero(real))


@pytest.mark.tf
def test_the_readers_give_the_same_examples_with_the_same_masks(data, tok):
    """An example's dynamic masks are keyed by (seed, epoch, file, record), whatever the reader:
    one epoch through Grain and through tf.data holds the same rows, masks included."""
    grain_rows = _epoch(data["plain"], tok, "grain", dynamic_masking=True)
    tf_rows = _epoch(data["plain"], tok, "tf.data", dynamic_masking=True)
    assert sum(grain_rows.values()) > 1000
    assert grain_rows == tf_rows


@pytest.fixture(scope="module")
def array_records(data, tmp_path_factory):
    """data["plain"]'s records, the same files in the same order, as ArrayRecord shards."""
    folder = tmp_path_factory.mktemp("array_records")
    for path in sorted(glob.glob(data["plain"])):
        name = os.path.basename(path).replace(".tfrecord", ".array_record")
        record_formats.write_records(str(folder / name), tfrecord.read_records(path),
                                     "array_record")
    return str(folder / "*.array_record")


def test_array_record_shards_give_the_batches_of_their_tfrecords(data, array_records, tok):
    make = lambda pattern, **kw: _iterator(pattern, tok, dynamic_masking=True, **kw)
    for kwargs in ({}, {"packing": True}, {"split": "eval", "eval_fraction": 0.2}):
        assert _digest(make(array_records, **kwargs), 30) == _digest(make(data["plain"], **kwargs),
                                                                     30)
    with pytest.raises(ValueError, match="input_pipeline 'tf.data' does not read"):
        make(array_records, input_pipeline="tf.data")


def test_grain_shuffles_all_records_together_anew_each_epoch(data, tok):
    """A global shuffle: rows of every file from the first batch on, another order each epoch."""
    records = read_records(sorted(glob.glob(data["plain"])))
    n = len(records["input_ids"])
    rows = _concat(list(itertools.islice(_iterator(data["plain"], tok, dynamic_masking=True),
                                         2 * n // BATCH)))
    index = {bytes(row): i for i, row in enumerate(np.ascontiguousarray(records["input_ids"]))}
    restored = masking.unmask(rows["input_ids"], rows["masked_lm_positions"],
                              rows["masked_lm_ids"], rows["masked_lm_weights"])
    order = np.array([index[bytes(np.ascontiguousarray(row, records["input_ids"].dtype))]
                      for row in restored])
    first, second = order[:n], order[n:2 * n]
    assert sorted(first) == list(range(n))  # an epoch holds every record once
    counts = np.bincount(np.searchsorted(np.cumsum(read_counts(data["plain"])), first[:BATCH],
                                         side="right"), minlength=3)
    assert (counts > 0).all(), counts  # the first batch draws from all three files
    assert np.mean(first[:len(second)] == second) < 0.05


def read_counts(pattern):
    return [len(record_sources.RecordFiles([p])) for p in sorted(glob.glob(pattern))]


def test_grain_names_a_bad_file_and_record(tmp_path, data, tok):
    good = sorted(glob.glob(data["static"]))[0]
    raw = open(good, "rb").read()
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(ValueError, match=f"{cut}: record [0-9]+ is cut short"):
        next(_iterator(str(cut), tok))
    flipped = bytearray(raw)
    flipped[200] ^= 0xFF  # inside the first record's bytes
    bad = tmp_path / "flipped.tfrecord"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=f"{bad}: record 0 fails its checksum"):
        list(_iterator(str(bad), tok, dynamic_masking=True, repeat=False))
    other = tmp_path / "other.tfrecord"
    tfrecord_writer = tfrecord.RecordWriter(str(other))
    tfrecord_writer.write(b"not an example")
    tfrecord_writer.close()
    with pytest.raises(ValueError, match=f"{other}: record 0 is not a tf.train.Example"):
        next(_iterator(str(other), tok, dynamic_masking=True))


def test_grain_worker_processes_give_the_batches_and_errors_of_threads(short_rows, data, tok,
                                                                      tmp_path):
    """input_workers=2: chunks read, parsed and masked in two worker processes, in turn, are the
    batches and state made in threads; a bad record read in a worker is named as in threads."""
    iterator = _iterator(short_rows, tok, dynamic_masking=True, packing=True,
                         whole_word_masking=True, per_host_batch_size=32, input_workers=2)
    assert _digest(iterator) == GRAIN_DIGESTS[(True, True)]
    flipped = bytearray(open(sorted(glob.glob(data["static"]))[0], "rb").read())
    flipped[200] ^= 0xFF
    bad = tmp_path / "flipped.tfrecord"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=f"{bad}: record 0 fails its checksum"):
        list(_iterator(str(bad), tok, repeat=False, input_workers=2))
