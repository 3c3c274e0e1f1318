"""Google's English ALBERT tokenizer: a SentencePiece `spiece.model` with `<pad>`/`<unk>`
and control pieces [CLS], [SEP], [MASK] (trained here as ALBERT's was: no released
spiece.model is available offline), ALBERT's preprocessing and digit-comma split, against
transformers' AlbertTokenizer on the same file; then an HF ALBERT directory with only
spiece.model converts, embeds and exports back."""
import gzip
import itertools
import json
import random

import numpy as np
import pytest
import sentencepiece as spm

from bert_jax import cli
from bert_jax.data import corpus
from bert_jax.tokenization import (
    AlbertNormalization,
    SentencePieceTokenizer,
    TokenizerError,
    load_tokenizer,
)
from bert_jax.tokenization.text_io import encode_pair
from bert_jax.weights import pretrained

transformers = pytest.importorskip("transformers", reason="the reference needs the test extras")

WORD_START = "\u2581"
TEXTS = [
    "Hello World!",
    "Café au lait, NAÏVE résumé and the Ångström façade of Straße Über",
    "  Whitespace\t runs\n\nand\u00a0\u00a0no-break  spaces\u3000too  ",
    "He said ``quoted'' twice, ``again''.",
    "北京欢迎你 and 東京 with emoji 😀 🎉 ❤",
    "In 1999, we spent $1,234,567 on 12, 13 or 5,000 roads; 42, 7, and 2020, too.",
    "Ｆｕｌｌ-width ＡＢＣ, ligatures ﬁ ﬂ, ½ and ① ② ③",
    "MiXeD CaSe İstanbul ΑΘΗΝΑ",
    "",
]


def _training_lines():
    rng = random.Random(0)
    with gzip.open(sorted(corpus.expand_inputs([corpus.DEFAULT_CORPUS]))[-1], "rt") as f:
        lines = [line.strip() for line in itertools.islice(f, 4000) if line.strip()]
    numbers = [f"In {rng.randint(1900, 2020)}, we spent ${rng.randint(1, 999)},"
               f"{rng.randint(0, 999):03d} on {rng.randint(1, 99)}, {rng.randint(1, 99)}, or "
               f"{rng.randint(1, 9)},000 roads." for _ in range(2000)]
    return lines + numbers + TEXTS * 20


def train_spiece(path, **specials):
    """An ALBERT-style spiece.model at `path` (`specials` override ALBERT's piece setup)."""
    options = dict(pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                   control_symbols=["[CLS]", "[SEP]", "[MASK]"])
    options.update(specials)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(_training_lines()),
                                   model_prefix=str(path.with_suffix("")), vocab_size=2000,
                                   character_coverage=0.9995, minloglevel=2, num_threads=1,
                                   **options)
    return str(path)


@pytest.fixture(scope="module")
def hf_tokenizer_dir(tmp_path_factory):
    """A directory with only spiece.model, as albert-base-v2 ships it."""
    directory = tmp_path_factory.mktemp("albert_tok")
    train_spiece(directory / "spiece.model")
    return directory


@pytest.fixture(scope="module")
def reference(hf_tokenizer_dir):
    return transformers.AlbertTokenizer.from_pretrained(str(hf_tokenizer_dir))


def digit_comma(token: str) -> bool:
    return len(token) > 1 and token[-1] == "," and token[-2].isdigit()


def google_digit_comma_split(tokens, sp):
    """What Google's ALBERT code (and transformers' sentencepiece-based AlbertTokenizer
    before version 5) does after SentencePiece; transformers 5's AlbertTokenizer, built on
    the tokenizers library, leaves such pieces whole. Checked against transformers
    4.57.6's AlbertTokenizer on 16000 texts."""
    out = []
    for token in tokens:
        if digit_comma(token):
            parts = sp.encode(token[:-1].replace(WORD_START, ""), out_type=str)
            if not token.startswith(WORD_START) and parts[0].startswith(WORD_START):
                parts = parts[1:] if parts[0] == WORD_START else [parts[0][1:]] + parts[1:]
            out += parts + [","]
        else:
            out.append(token)
    return out


def reference_encoding(reference, sp, text, pair=None):
    """transformers' ids and token types of [CLS] text [SEP] (pair [SEP]), split as Google
    splits digit-comma pieces."""
    encoded = reference(text, pair, return_token_type_ids=True)
    tokens = google_digit_comma_split(reference.convert_ids_to_tokens(encoded["input_ids"]), sp)
    types = [0] * (tokens.index("[SEP]") + 1)
    return reference.convert_tokens_to_ids(tokens), types + [1] * (len(tokens) - len(types))


def test_special_pieces_come_from_the_model(hf_tokenizer_dir):
    tok = SentencePieceTokenizer(str(hf_tokenizer_dir / "spiece.model"), AlbertNormalization())
    assert [tok.id_to_token(i) for i in range(5)] == ["<pad>", "<unk>", "[CLS]", "[SEP]",
                                                      "[MASK]"]
    assert tok.special_ids() == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert tok.token_to_id("no such piece") == 1
    assert tok.word_start_table()[:5].all()


@pytest.mark.parametrize("albert", [AlbertNormalization(), AlbertNormalization(False, True)],
                         ids=["uncased", "cased_with_accents"])
def test_encodes_as_transformers_albert_tokenizer(hf_tokenizer_dir, albert):
    """Token for token: single texts and pairs, ids and token types."""
    tok = SentencePieceTokenizer(str(hf_tokenizer_dir / "spiece.model"), albert)
    reference = transformers.AlbertTokenizer.from_pretrained(
        str(hf_tokenizer_dir), do_lower_case=albert.do_lower_case,
        keep_accents=albert.keep_accents)
    sp = spm.SentencePieceProcessor(model_file=str(hf_tokenizer_dir / "spiece.model"))
    assert any(map(digit_comma, reference.tokenize(TEXTS[5]))), \
        "the test model should have digit-comma pieces for the split to act on"
    for text in TEXTS:
        expected_ids, _ = reference_encoding(reference, sp, text)
        assert encode_pair(tok, text, None, 512)[0] == expected_ids, text
        assert tok.encode_ids([text])[0] == expected_ids[1:-1], text
    for a, b in itertools.permutations(TEXTS[:-1], 2):  # transformers reads "" as no pair
        assert encode_pair(tok, a, b, 512) == reference_encoding(reference, sp, a, b), (a, b)
    assert not any(map(digit_comma, tok.encode(TEXTS[5]).tokens))


def test_offsets_point_into_the_original_text(hf_tokenizer_dir):
    tok = SentencePieceTokenizer(str(hf_tokenizer_dir / "spiece.model"), AlbertNormalization())
    albert = AlbertNormalization()
    for text in TEXTS:
        enc = tok.encode(text)
        assert len(enc.ids) == len(enc.offsets) == len(enc.word_ids)
        for index, token, (start, end) in zip(enc.ids, enc.tokens, enc.offsets):
            assert 0 <= start <= end <= len(text)
            if index != tok.unk_id:  # the piece is in the normalized original ("½" -> 1⁄2)
                assert token.lstrip(WORD_START) in albert.normalize(text[start:end]), text
    text = "He said ``Hi'' in 1999, twice"
    enc = tok.encode(text)
    spans = [text[start:end] for start, end in enc.offsets]
    assert [s for t, s in zip(enc.tokens, spans) if t.endswith('"')] == ["``", "''"]
    number = text.index("1999,")  # a digit-comma piece split: each part over its characters
    assert "".join(s for (start, _), s in zip(enc.offsets, spans)
                   if number <= start < number + 5) == "1999,"
    assert enc.word_ids == sorted(enc.word_ids)


def test_in_graph_tokenizer_equals_python(hf_tokenizer_dir):
    """tf_tokenize (SavedModels) gives encode's ids, preprocessing and split included.
    (Long numbers like 7,000,000,000 are left out: tensorflow-text's SentencePiece breaks
    ties between equal-score segmentations differently from the Python package.)"""
    for albert in (AlbertNormalization(), AlbertNormalization(False, True)):
        tok = SentencePieceTokenizer(str(hf_tokenizer_dir / "spiece.model"), albert)
        texts = TEXTS + [t.upper() for t in TEXTS] + ["ΟΔΟΣ ΟΔΟΣ",
                                                      "a\u0301\u0323 \u1680x\x1cy"]
        assert tok.tf_tokenize(texts).to_list() == tok.encode_ids(texts)


def test_model_dir_records_the_preprocessing(hf_tokenizer_dir, tmp_path):
    tok = SentencePieceTokenizer(str(hf_tokenizer_dir / "spiece.model"),
                                 AlbertNormalization(keep_accents=True))
    tok.save(str(tmp_path))
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config == {"type": "sentencepiece",
                      "albert": {"do_lower_case": True, "keep_accents": True}}
    again = load_tokenizer(str(tmp_path))
    assert again.albert == tok.albert and again.encode(TEXTS[1]) == tok.encode(TEXTS[1])
    plain = SentencePieceTokenizer(str(hf_tokenizer_dir / "spiece.model"))
    assert len({plain.fingerprint(), tok.fingerprint(),
                SentencePieceTokenizer(plain.model_path, AlbertNormalization()).fingerprint()
                }) == 3
    config["albert"]["remove_space"] = False
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(TokenizerError, match="remove_space"):
        load_tokenizer(str(tmp_path))


@pytest.mark.parametrize("specials, missing", [
    (dict(control_symbols=["[CLS]", "[SEP]"]), "[MASK]"),
    (dict(pad_id=-1, unk_id=0, control_symbols=["[CLS]", "[SEP]", "[MASK]"]), "pad"),
])
def test_a_missing_special_piece_is_named(tmp_path, specials, missing):
    path = train_spiece(tmp_path / "spiece.model", **specials)
    with pytest.raises(TokenizerError, match=missing.replace("[", r"\[")) as error:
        SentencePieceTokenizer(path, AlbertNormalization())
    assert "\n" not in str(error.value)


def _albert_hf_dir(directory, spiece, seed=3):
    """A random transformers AlbertForMaskedLM saved with `spiece` and no vocab.txt."""
    torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
    from helpers.parity import ALBERT, albert_reference

    config = ALBERT.replace(vocab_size=2000)
    model = albert_reference(config, transformers.AlbertForMaskedLM, seed=seed)
    model.save_pretrained(directory)
    (directory / "spiece.model").write_bytes(open(spiece, "rb").read())
    return torch, model


def test_convert_embed_finetune_and_back(hf_tokenizer_dir, reference, tmp_path):
    """An HF ALBERT directory with only spiece.model (albert-base-v2's layout) converts; the
    converted directory tokenizes as transformers does for `embed` and fine-tuning, embeds
    as AlbertModel, and exports back to a directory transformers tokenizes the same."""
    hf_dir, model_dir, back = tmp_path / "hf", tmp_path / "model", tmp_path / "back"
    torch, ref = _albert_hf_dir(hf_dir, hf_tokenizer_dir / "spiece.model")
    assert cli.main(["convert", "--from_hf", str(hf_dir), "--output", str(model_dir)]) == 0
    assert pretrained.load(model_dir).config.model_type == "albert"
    sp = spm.SentencePieceProcessor(model_file=str(hf_tokenizer_dir / "spiece.model"))

    tok = load_tokenizer(str(model_dir))  # what fine-tuning and embed read
    assert tok.albert == AlbertNormalization()
    lines = [t for t in TEXTS if t and "\n" not in t]
    for a, b in zip(lines, lines[1:]):
        assert encode_pair(tok, a, b, 64) == reference_encoding(reference, sp, a, b)

    texts, vectors = tmp_path / "texts.txt", tmp_path / "vectors.npy"
    texts.write_text("\n".join(lines) + "\n")
    assert cli.main(["embed", "--model", str(model_dir), "--input", str(texts),
                     "--output", str(vectors), "--pooling", "mean"]) == 0
    for text, vector in zip(lines, np.load(vectors)):
        ids = torch.tensor([reference_encoding(reference, sp, text)[0]])
        with torch.no_grad():
            states = ref.albert(input_ids=ids).last_hidden_state[0].numpy()
        np.testing.assert_allclose(vector, states.mean(0), atol=1e-4)

    assert cli.main(["convert", "--model", str(model_dir), "--to_hf", str(back)]) == 0
    exported = transformers.AlbertTokenizer.from_pretrained(str(back))
    assert [exported(t)["input_ids"] for t in TEXTS] == [reference(t)["input_ids"] for t in TEXTS]


def test_convert_refuses_a_spiece_model_without_mask(tmp_path, capsys):
    hf_dir = tmp_path / "hf"
    _albert_hf_dir(hf_dir, train_spiece(tmp_path / "spiece.model",
                                        control_symbols=["[CLS]", "[SEP]"]))
    capsys.readouterr()  # transformers' progress bars
    assert cli.main(["convert", "--from_hf", str(hf_dir), "--output", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert "[MASK]" in error and len(error.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_saved_model_tokenizes_as_albert(hf_tokenizer_dir, tmp_path):
    """An exported ALBERT-tokenized classifier: the SavedModel's serve_text, reloaded in a
    fresh process, gives the ids of the Python tokenizer (preprocessing and split in-graph)."""
    from bert_jax.models import heads
    from bert_jax.serve import export

    from helpers.export import random_params, reload_saved_model_texts
    from helpers.parity import ALBERT

    tok = SentencePieceTokenizer(str(hf_tokenizer_dir / "spiece.model"), AlbertNormalization())
    config = ALBERT.replace(vocab_size=tok.vocab_size)
    params = random_params(heads.BertForSequenceClassification(config, 2))
    pretrained.save(tmp_path / "model", config, params, tokenizer=tok,
                    task={"family": "classification", "label_names": ["x", "y"]})
    export.export(str(tmp_path / "model"), str(tmp_path / "out"), platforms=("cpu",))
    texts = [t for t in TEXTS if t]
    out = reload_saved_model_texts(tmp_path / "out", texts, tmp_path)
    for row, text in zip(out["input_ids"], texts):
        expected = encode_pair(tok, text, None, 64)[0]
        assert row.tolist() == expected + [0] * (len(row) - len(expected)), text
