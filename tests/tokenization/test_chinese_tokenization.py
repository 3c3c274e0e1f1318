"""Chinese WordPiece against transformers' BertTokenizer, for the Python and the
in-graph (tensorflow-text) tokenizer: CJK compatibility ideographs, and every
line of People's Daily with a vocabulary `train-tokenizer` learns from it."""
import gzip
import os

import pytest

from bert_jax.data import build_vocab
from bert_jax.tokenization import WordPieceTokenizer, load_tokenizer

from helpers import REPO

PEOPLE_DAILY = os.path.join(REPO, "..", "shared", "data", "chinese",
                            "people_daily_199801.tagged.txt.gz")

# U+F900 -> 豈, U+F901 -> 更, U+FA0C -> 兀, U+2F800 -> 丽, U+2F81D -> 成: BERT's uncased
# normalisation (NFD) maps compatibility ideographs to the unified forms.
LINES = [
    "中共中央总书记、国家主席江泽民发表１９９８年新年讲话。",
    "豈\uf900更\uf901 兀\ufa0c丽\U0002f800成\U0002f81d",
    "混合English和中文text，iPhone手机¥3999元！",
    "“引号”（括号）《书名号》——破折号……省略号",
    "\u3000全角空格\u00a0和Ｆｕｌｌｗｉｄｔｈ字母１２３",
]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "豈", "更", "兀", "丽", "成", "\uf900",
         "中", "共", "央", "总", "书", "记", "、", "国", "家", "主", "席", "江", "泽", "民",
         "发", "表", "１", "９", "８", "年", "新", "讲", "话", "。", "混", "合", "和", "文",
         "english", "text", "，", "ip", "##hone", "手", "机", "¥", "3", "##999", "元", "！",
         "“", "引", "号", "”", "（", "括", "）", "《", "名", "》", "—", "破", "折", "…", "省",
         "略", "全", "角", "空", "格", "字", "母", "２", "３", "e", "##n", "##g"]


def _reference(vocab_path, lower):
    transformers = pytest.importorskip("transformers")
    return transformers.BertTokenizer(vocab_path, do_lower_case=lower)


def _assert_parity(vocab_path, lines, lower=True, in_graph=True):
    ours = load_tokenizer(vocab_path, do_lower_case=lower)
    theirs = _reference(vocab_path, lower)(lines, add_special_tokens=False)["input_ids"]
    for line, ids in zip(lines, theirs):
        assert ours.encode(line).ids == ids, line
    assert ours.encode_ids(lines) == theirs
    if in_graph:
        for line, ids in zip(lines, ours.tf_tokenize(lines).to_list()):
            assert ids == theirs[lines.index(line)], line


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("zh") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return str(path)


def test_compatibility_ideographs_normalised_when_uncased(small_vocab):
    tok = load_tokenizer(small_vocab)
    enc = tok.encode("\uf900\uf901 \U0002f800")
    assert enc.tokens == ["豈", "更", "丽"]
    assert enc.offsets == [(0, 1), (1, 2), (3, 4)]  # into the original string
    _assert_parity(small_vocab, LINES)


def test_compatibility_ideographs_kept_when_cased(small_vocab):
    tok = load_tokenizer(small_vocab, do_lower_case=False)
    assert tok.encode("\uf900\uf901").tokens == ["\uf900", "[UNK]"]
    # tensorflow-text's cased mode applies no normalisation either.
    _assert_parity(small_vocab, LINES[:2], lower=False)


@pytest.fixture(scope="module")
def people_daily_lines():
    if not os.path.exists(PEOPLE_DAILY):
        pytest.skip(f"People's Daily is not available at {PEOPLE_DAILY} "
                    "(the shared Chinese data set next to the repository)")
    with gzip.open(PEOPLE_DAILY, "rt", encoding="utf-8") as f:
        return ["".join(w.rsplit("/", 1)[0] for w in line.split()) for line in f
                if line.strip()]


@pytest.mark.long
def test_every_people_daily_line_matches_transformers(people_daily_lines, tmp_path):
    corpus = tmp_path / "pd.txt"
    corpus.write_text("\n".join(people_daily_lines) + "\n", encoding="utf-8")
    build_vocab.train_tokenizer([str(corpus)], 8000, "wordpiece", str(tmp_path / "vocab"))
    tok = load_tokenizer(str(tmp_path / "vocab"))
    assert isinstance(tok, WordPieceTokenizer)
    ids = tok.encode_ids(people_daily_lines)
    assert sum(i.count(tok.unk_id) for i in ids) < 0.01 * sum(map(len, ids))  # rare characters
    _assert_parity(str(tmp_path / "vocab" / "vocab.txt"), people_daily_lines)


def test_people_daily_slice_matches_transformers(people_daily_lines, tmp_path):
    lines = people_daily_lines[:400] + LINES
    corpus = tmp_path / "pd.txt"
    corpus.write_text("\n".join(people_daily_lines[:400]) + "\n", encoding="utf-8")
    build_vocab.train_tokenizer([str(corpus)], 1500, "wordpiece", str(tmp_path / "vocab"))
    _assert_parity(str(tmp_path / "vocab" / "vocab.txt"), lines)
