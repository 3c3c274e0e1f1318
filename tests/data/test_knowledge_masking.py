"""ERNIE's knowledge masking: with knowledge_masking='entity' (an entity list or jieba's
nr/ns/nt/nz tags) or 'phrase' (a reference chunking) create-data's static masks and the
pipeline's dynamic masks take whole units or nothing of them, within BERT's 15% budget
and 80/10/10 split (drawn once per unit)."""
import numpy as np
import pytest

from bert_jax.data import chinese_words, masking
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.data.pipeline import make_pretrain_iterator
from bert_jax.tokenization import WordPieceTokenizer

from helpers.records import read_records

MAX_SEQ, MAX_PRED = 64, 20
SENTENCES = [  # reference words, separated by spaces
    "中共中央 总书记 、 国家 主席 江泽民 发表 新年 讲话",
    "北京 大学 的 学生 在 图书馆 里 认真 学习",
    "上海 浦东 开发 开放 进入 新 的 阶段",
    "香港 特别行政区 政府 宣布 新 的 政策",
    "中国 人民 银行 今天 发布 了 新 的 利率",
]
ENTITIES = ["中共中央", "江泽民", "北京大学", "上海浦东", "香港特别行政区", "中国人民银行"]


def _tokenizer():
    chars = sorted({c for t in SENTENCES for c in t if not c.isspace()})
    return WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars)


def _create(tmp_path, tok, *, static=True, mode="entity", prob=1.0, dupe=60):
    (tmp_path / "input.txt").write_text(
        "".join(line.replace(" ", "") + "\n\n" for line in SENTENCES), encoding="utf-8")
    (tmp_path / "entities.txt").write_text("\n".join(ENTITIES) + "\n", encoding="utf-8")
    # phrase mode: the chunks are the entities, other words stand alone.
    chunks = [" ".join(_chunk(line)) for line in SENTENCES]
    (tmp_path / "ref.txt").write_text("".join(c + "\n\n" for c in chunks), encoding="utf-8")
    tok.save(str(tmp_path / "vocab"))
    files = cpd.shard_paths(str(tmp_path / "out"), 1)
    options = DataOptions(max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED,
                          dupe_factor=dupe, dynamic_masking=not static, knowledge_masking=mode,
                          knowledge_masking_prob=prob, chinese_segmenter="none",
                          entity_file=str(tmp_path / "entities.txt") if mode == "entity"
                          else "")
    stats = cpd.create_pretraining_data(
        [str(tmp_path / "input.txt")], files, str(tmp_path / "vocab"), options, progress=False,
        chinese_ref_files=[str(tmp_path / "ref.txt")] if mode == "phrase" else ())
    return files, stats


def _chunk(line):
    """Reference words with the listed entities joined into one chunk each."""
    text, out, position = line.replace(" ", ""), [], 0
    while position < len(text):
        entity = next((e for e in ENTITIES if text.startswith(e, position)), None)
        size = len(entity) if entity else 1
        out.append(text[position:position + size])
        position += size
    return out


def _read(paths):
    return read_records(paths, MAX_SEQ, MAX_PRED)


def _check_units(rows, tok):
    """Asserts no entity is partly masked and the budget holds; returns
    (masked share of the budget, [(entity length, all [MASK], none [MASK])] per masked one)."""
    original = masking.unmask(rows["input_ids"], rows["masked_lm_positions"],
                              rows["masked_lm_ids"], rows["masked_lm_weights"])
    masked = np.zeros(original.shape, bool)
    r, s = np.nonzero(rows["masked_lm_weights"] > 0)
    masked[r, rows["masked_lm_positions"][r, s]] = True
    patterns = [tok.encode(e).ids for e in ENTITIES]
    found, seen = [], 0
    for row in range(len(original)):
        ids = original[row].tolist()
        for pattern in patterns:
            for start in range(len(ids) - len(pattern) + 1):
                if ids[start:start + len(pattern)] != pattern:
                    continue
                seen += 1
                flags = masked[row, start:start + len(pattern)]
                assert flags.all() or not flags.any(), ("entity split", row, start)
                if flags.all():
                    shown = rows["input_ids"][row, start:start + len(pattern)]
                    found.append((len(pattern), (shown == tok.mask_id).all(),
                                  (shown != tok.mask_id).all()))
    assert seen > 0
    n = rows["input_mask"].sum(1)
    budget = np.minimum(MAX_PRED, np.maximum(1, np.round(n * 0.15)))
    assert (masked.sum(1) <= budget).all()
    return masked.sum() / budget[n > 0].sum(), found


@pytest.mark.parametrize("mode", ["entity", "phrase"])
def test_static_knowledge_masks_never_split_a_unit(tmp_path, mode):
    tok = _tokenizer()
    files, stats = _create(tmp_path, tok, mode=mode)
    rows = _read(files)
    assert (rows["unit_start"] >= 0).all() and rows["unit_start"].sum() < rows["word_start"].sum()
    share, found = _check_units(rows, tok)
    assert share > 0.85, share  # a unit that would overshoot the budget is skipped
    assert len(found) > 50 and max(length for length, _, _ in found) >= 6
    all_mask = np.array([a for _, a, _ in found])
    assert all(a or z for _, a, z in found)  # 80/10/10 drawn once per unit
    assert 0.65 < all_mask.mean() < 0.95
    summary = stats.summary()
    assert summary["knowledge_units"] == 6 and summary["knowledge_rows"] == stats.instances
    assert 0 < summary["masked_in_knowledge_unit_fraction"] < 1
    assert 0.75 < summary["mask_token_fraction"] < 0.85


def test_dynamic_knowledge_masks_never_split_an_entity(tmp_path):
    tok = _tokenizer()
    files, _ = _create(tmp_path, tok, static=False, prob=0.5, dupe=30)
    options = DataOptions(per_host_batch_size=64, max_seq_length=MAX_SEQ,
                              max_predictions_per_seq=MAX_PRED, dynamic_masking=True,
                              whole_word_masking=True, knowledge_masking="entity",
                              knowledge_masking_prob=1.0, repeat=False)
    batches = list(make_pretrain_iterator(files, options, process_index=0, process_count=1,
                                          tokenizer=tok))
    rows = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    rows = {k: v[rows["input_mask"].sum(1) > 0] for k, v in rows.items()}
    share, found = _check_units(rows, tok)
    assert share > 0.85 and len(found) > 20
    assert all(a or z for _, a, z in found)
    # Without knowledge masking the same records mask single characters: entities split.
    plain = make_pretrain_iterator(files, DataOptions(
        per_host_batch_size=64, max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED,
        dynamic_masking=True, repeat=False), process_index=0, process_count=1, tokenizer=tok)
    plain = list(plain)
    rows = {k: np.concatenate([b[k] for b in plain]) for k in batches[0]}
    with pytest.raises(AssertionError, match="entity split"):
        _check_units({k: v[rows["input_mask"].sum(1) > 0] for k, v in rows.items()}, tok)


def test_knowledge_masking_prob_mixes_word_rows(tmp_path):
    tok = _tokenizer()
    _, stats = _create(tmp_path, tok, prob=0.3, dupe=40)
    assert 0.15 < stats.knowledge_rows / stats.instances < 0.45


def test_jieba_entities_are_masked_whole():
    pytest.importorskip("jieba")
    spans = chinese_words.jieba_entities()("上海浦东开发开放，江泽民在中国人民银行")
    text = "上海浦东开发开放，江泽民在中国人民银行"
    assert [text[s:e] for s, e in spans] == ["上海浦东", "江泽民", "中国人民银行"]
    tok = _tokenizer()
    texts = [[line.replace(" ", "")] for line in SENTENCES]
    options = DataOptions(max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED,
                          dupe_factor=30, knowledge_masking="entity")
    rows = cpd.examples_from_texts(texts, tok, options)
    _, found = _check_units(rows, tok)
    assert max(length for length, _, _ in found) >= 4


def test_bad_knowledge_options_fail_clearly(tmp_path):
    tok = _tokenizer()
    with pytest.raises(ValueError, match="reference chunking file"):
        cpd.create_pretraining_data(
            [str(_write(tmp_path))], [str(tmp_path / "o.tfrecord")], str(_save(tok, tmp_path)),
            DataOptions(knowledge_masking="phrase"), progress=False)
    with pytest.raises(ValueError, match="unknown knowledge_masking"):
        DataOptions(knowledge_masking="x")
    for options, message in [(DataOptions(entity_file="e.txt"), "--entity_file lists"),
                             (DataOptions(knowledge_masking="entity",
                                          entity_file=str(tmp_path / "missing.txt")), "missing"),
                             (DataOptions(knowledge_masking="entity",
                                          knowledge_masking_prob=2.0), r"not in \[0, 1\]")]:
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            cpd.create_pretraining_data([str(_write(tmp_path))], [str(tmp_path / "o.tfrecord")],
                                        str(_save(tok, tmp_path)), options, progress=False)


def _write(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("".join(line.replace(" ", "") + "\n\n" for line in SENTENCES),
                    encoding="utf-8")
    return path


def _save(tok, tmp_path):
    tok.save(str(tmp_path / "vocab"))
    return tmp_path / "vocab"
