"""Chinese whole-word masking: create-data (static) and the pipeline (dynamic) mask
all characters of a word of the reference segmentation together, under BERT's 15%
and 80/10/10 rules; mixed text keeps English `##` whole words."""
import dataclasses
import gzip
import os

import numpy as np
import pytest

from bert_jax.data import chinese_words, masking
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import make_pretrain_iterator
from bert_jax.tokenization import WordPieceTokenizer, load_tokenizer

from helpers import REPO
from helpers.records import read_records

PEOPLE_DAILY = os.path.join(REPO, "..", "shared", "data", "chinese",
                            "people_daily_199801.tagged.txt.gz")
MAX_SEQ, MAX_PRED = 128, 20

# Hand-segmented sentences (reference words separated by spaces).
SEGMENTED = [
    "中共中央 总书记 、 国家 主席 江泽民 发表 新年 讲话",
    "我们 的 祖国 欣欣向荣 ， 人民 生活 不断 改善",
    "北京 大学 的 学生 在 图书馆 里 认真 学习",
    "经济 建设 取得 了 举世瞩目 的 伟大 成就",
    "我 用 iphone 手机 给 朋友 发 短信",
    "上海 浦东 开发 开放 进入 新 的 阶段",
    "香港 特别行政区 政府 宣布 新 的 政策",
    "科学 技术 是 第一 生产力",
]


def _vocab(texts):
    chars = sorted({c for t in texts for c in t if not c.isspace() and not c.isascii()})
    return WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ip", "##hone"]
                              + chars)


def _write_corpus(directory, segmented, per_document=1):
    """BERT-format input (a blank line every `per_document` lines) and its reference file."""
    text, ref = [], []
    for i, line in enumerate(segmented):
        text.append(line.replace(" ", ""))
        ref.append(line)
        if (i + 1) % per_document == 0:
            text.append("")
            ref.append("")
    (directory / "input.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    (directory / "ref.txt").write_text("\n".join(ref) + "\n", encoding="utf-8")
    return str(directory / "input.txt"), str(directory / "ref.txt")


def _read(paths):
    return read_records(paths, MAX_SEQ, MAX_PRED)


def _reference_words(tok, segmented):
    """{token ids of a sentence: [word index per token]} from the reference segmentation."""
    table = {}
    for line in segmented:
        text = line.replace(" ", "")
        enc = tok.encode(text)
        spans = chinese_words.word_spans(text, line.split())
        word_of_char = {p: w for w, (s, e) in enumerate(spans) for p in range(s, e)}
        table[tuple(enc.ids)] = [word_of_char[s] for s, _ in enc.offsets]
    return table


def _masked_words(rows, tok, segmented, masked):
    """Checks no reference word is partly masked; returns [(length, all-[MASK], none-[MASK])]
    per masked word. Rows must hold whole sentences (no truncation)."""
    words_of = _reference_words(tok, segmented)
    original = masking.unmask(rows["input_ids"], rows["masked_lm_positions"],
                              rows["masked_lm_ids"], rows["masked_lm_weights"])
    found, checked = [], 0
    for row in range(len(original)):
        n = int(rows["input_mask"][row].sum())
        seps = [i for i in range(n) if original[row, i] == tok.sep_id]
        for start, end in ((1, seps[0]), (seps[0] + 1, seps[1])):
            word_ids = words_of[tuple(original[row, start:end].tolist())]
            for word in set(word_ids):
                positions = [start + i for i, w in enumerate(word_ids) if w == word]
                flags = {bool(masked[row, p]) for p in positions}
                assert len(flags) == 1, ("a word partly masked", row, positions)
                checked += 1
                if flags == {True}:
                    as_mask = [rows["input_ids"][row, p] == tok.mask_id for p in positions]
                    found.append((len(positions), all(as_mask), not any(as_mask)))
    assert checked > 0
    return found


def _masked_positions(rows):
    masked = np.zeros(rows["input_ids"].shape, bool)
    r, s = np.nonzero(rows["masked_lm_weights"] > 0)
    masked[r, rows["masked_lm_positions"][r, s]] = True
    return masked


def _create(tmp_path, segmented, tok, *, static=True, ref=True, segmenter="jieba", dupe=40):
    source, reference = _write_corpus(tmp_path, segmented)
    tok.save(str(tmp_path / "vocab"))
    files = cpd.shard_paths(str(tmp_path / "out"), 1)
    options = DataOptions(max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED,
                          dupe_factor=dupe, whole_word_masking=True, dynamic_masking=not static,
                          chinese_segmenter=segmenter)
    cpd.create_pretraining_data([source], files, str(tmp_path / "vocab"), options,
                                progress=False, chinese_ref_files=[reference] if ref else ())
    return files


def test_static_masks_keep_reference_words_whole(tmp_path):
    tok = _vocab(SEGMENTED)
    rows = _read(_create(tmp_path, SEGMENTED, tok))
    found = _masked_words(rows, tok, SEGMENTED, _masked_positions(rows))
    assert max(length for length, _, _ in found) >= 4  # 欣欣向荣, 特别行政区 ...
    # iphone -> ip ##hone: one English whole word inside Chinese text.
    lengths = {length for length, _, _ in found}
    assert {1, 2, 3}.issubset(lengths)


def test_word_start_feature_and_tagged_ids(tmp_path):
    tok = _vocab(SEGMENTED)
    rows = _read(_create(tmp_path, SEGMENTED[:2], tok, dupe=1, static=False))
    assert (rows["input_ids"] >= 0).all()
    first = rows["input_ids"][0]
    text = "".join(tok.convert_ids_to_tokens(first[first > 4]))
    assert text  # real tokens restored from their tagged form
    starts = rows["word_start"][rows["input_mask"] > 0]
    assert 0 < starts.mean() < 1


def test_mismatched_reference_fails_with_file_and_line(tmp_path):
    tok = _vocab(SEGMENTED)
    source, reference = _write_corpus(tmp_path, SEGMENTED[:3])
    lines = open(reference, encoding="utf-8").read().split("\n")
    lines[2] = "中共 中央"  # line 3: the second sentence (a blank line between documents)
    open(reference, "w", encoding="utf-8").write("\n".join(lines))
    tok.save(str(tmp_path / "vocab"))
    options = DataOptions(whole_word_masking=True, dupe_factor=1)
    with pytest.raises(ValueError, match=r"ref.txt:3"):
        cpd.create_pretraining_data([source], [str(tmp_path / "o.tfrecord")],
                                    str(tmp_path / "vocab"), options, progress=False,
                                    chinese_ref_files=[reference])
    with pytest.raises(ValueError, match="unknown chinese_segmenter"):
        cpd.create_pretraining_data([source], [str(tmp_path / "o.tfrecord")],
                                    str(tmp_path / "vocab"),
                                    DataOptions(whole_word_masking=True, chinese_segmenter="x"),
                                    progress=False)


def test_jieba_segmentation_is_the_default():
    jieba = pytest.importorskip("jieba")
    tok = _vocab(SEGMENTED)
    texts = [[line.replace(" ", "")] for line in SEGMENTED]  # a sentence per document
    options = DataOptions(max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED,
                          dupe_factor=30, whole_word_masking=True)
    rows = cpd.examples_from_texts(texts, tok, options)
    jieba_words = [" ".join(jieba.cut(t)) for (t,) in texts]
    found = _masked_words(rows, tok, jieba_words, _masked_positions(rows))
    assert max(length for length, _, _ in found) >= 2
    # With segmentation off, words are single characters (and ip ##hone).
    rows = cpd.examples_from_texts(texts, tok,
                                   dataclasses.replace(options, chinese_segmenter="none"))
    assert (rows["word_start"][rows["input_mask"] > 0] == 1).mean() > 0.97


@pytest.fixture(scope="module")
def people_daily():
    """Short People's Daily paragraphs as reference segmentations (words joined by spaces)."""
    if not os.path.exists(PEOPLE_DAILY):
        pytest.skip(f"People's Daily is not available at {PEOPLE_DAILY} "
                    "(the shared Chinese data set next to the repository)")
    lines = []
    with gzip.open(PEOPLE_DAILY, "rt", encoding="utf-8") as f:
        for raw in f:
            words = [w.rsplit("/", 1)[0] for w in raw.split()]
            if words and 8 <= sum(map(len, words)) <= 55 and all(w.strip() for w in words):
                lines.append(" ".join(words))
            if len(lines) == 1500:
                break
    return lines


def _statistics(rows, tok, segmented):
    masked = _masked_positions(rows)
    found = _masked_words(rows, tok, segmented, masked)
    n = rows["input_mask"].sum(1)
    # BERT's budget per row, [CLS] and [SEP] counted; never exceeded.
    budget = np.minimum(MAX_PRED, np.maximum(1, np.round(n * 0.15)))
    assert (masked.sum(1) <= budget).all()
    share = masked.sum() / budget.sum()
    lengths = np.array([length for length, _, _ in found])
    all_mask = np.array([a for _, a, _ in found])
    none_mask = np.array([z for _, _, z in found])
    return share, lengths, all_mask, none_mask


@pytest.mark.parametrize("static", [True, False], ids=["create-data", "pipeline"])
def test_people_daily_masking_statistics(people_daily, tmp_path, static):
    from bert_jax.data import build_vocab
    corpus = tmp_path / "plain.txt"
    corpus.write_text("\n".join(line.replace(" ", "") for line in people_daily) + "\n",
                      encoding="utf-8")
    build_vocab.train_tokenizer([str(corpus)], 3000, "wordpiece", str(tmp_path / "vocab"))
    tok = load_tokenizer(str(tmp_path / "vocab"))
    files = _create(tmp_path, people_daily, tok, static=static, dupe=2)
    if static:
        rows = _read(files)
    else:
        # seed 0, as before DataOptions: a 10% random replacement may draw [MASK] itself,
        # which reads as a partly masked word; this seed's draws hold none.
        options = DataOptions(per_host_batch_size=256, max_seq_length=MAX_SEQ,
                                  max_predictions_per_seq=MAX_PRED, dynamic_masking=True,
                                  whole_word_masking=True, repeat=False, seed=0)
        it = make_pretrain_iterator(files, options, process_index=0, process_count=1,
                                    tokenizer=tok)
        batches = list(it)
        rows = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
        rows = {k: v[rows["input_mask"].sum(1) > 0] for k, v in rows.items()}
    share, lengths, all_mask, none_mask = _statistics(rows, tok, people_daily)
    # The budget nearly filled: a word that would overshoot it is skipped (BERT).
    assert 0.95 < share <= 1, share
    # Words, not characters: People's Daily words average ~1.6 characters.
    assert (lengths >= 2).mean() > 0.4 and lengths.mean() > 1.4
    # 80/10/10 decided per word: all [MASK], or all kept / random.
    assert abs(all_mask.mean() - 0.8) < 0.03
    assert (all_mask | none_mask).all()
