"""Tagging raw Chinese text: words split as character-level CoNLL data is, one tag per
character, entities as character spans of the original string; the same through
`Finetuned.predict`, `bert-jax predict` and the exported model."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.finetune import cli, inference, job
from bert_jax.finetune.tasks import get_task
from bert_jax.serve import export
from bert_jax.tokenization import WordPieceTokenizer, text_io

from helpers.finetune import micro_config, shared_compilation_cache

SENTENCES = [  # (characters, tags): MSRA-style character-level NER
    ("江泽民在北京会见李鹏", "B-PER I-PER I-PER O B-LOC I-LOC O O B-PER I-PER"),
    ("新华社记者在上海报道", "B-ORG I-ORG I-ORG O O O B-LOC I-LOC O O"),
    ("中国人民银行发表讲话", "B-ORG I-ORG I-ORG I-ORG I-ORG I-ORG O O O O"),
]


def _vocab_dir(tmp_path):
    chars = sorted({c for text, _ in SENTENCES for c in text} | set("他说好"))
    tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ok", "3g",
                              "iphone", ",", "，", "。", "！"] + chars)
    tok.save(str(tmp_path / "vocab"))
    return str(tmp_path / "vocab")


def _write_conll(path, repeat=1):
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(repeat):
            for text, tags in SENTENCES:
                f.write("".join(f"{c}\t{t}\n" for c, t in zip(text, tags.split())) + "\n")
    return str(path)


def test_split_words_like_character_conll():
    """Chinese text: every non-space character a word, so an entity can start inside
    `992XR`; other text: runs end at whitespace and punctuation."""
    text = " 江泽民在北京，用iPhone 3G说：型号992XR "
    words, spans = text_io.split_words(text)
    assert words == [*"江泽民在北京，用iPhone3G说：型号992XR"]
    assert [text[s:e] for s, e in spans] == words
    assert text_io.split_words("Hello, world! 3.5 ok")[0] == [
        "Hello", ",", "world", "!", "3", ".", "5", "ok"]
    assert text_io.split_words("") == ([], [])


def test_split_words_in_graph_equals_python():
    """text_io.tf_split_words (SavedModel) splits as split_words, on every code point too."""
    import sys

    import tensorflow as tf
    every = "".join(f"a{chr(c)}" for c in range(1, sys.maxunicode + 1)
                    if not 0xD800 <= c <= 0xDFFF)  # each character next to a letter
    texts = [" 江泽民在北京，用iPhone 3G说：Hello, world! ", "", " \u3000 ",
             "Apple 公司在 California.", "Hello, world! 3.5 ok", "型号992XR",
             "a\x00b c\x0bd\x85e\u3000f\u2028g", "e\u0301 \u0301 x \U00011b00ab\U0001F600c", every]
    words, starts, ends = text_io.tf_split_words(tf.constant(texts))
    for i, text in enumerate(texts):
        want_words, want_spans = text_io.split_words(text)
        assert [w.decode("utf-8") for w in words[i].numpy()] == want_words
        assert list(zip(starts[i].numpy().tolist(), ends[i].numpy().tolist())) == want_spans
    assert len(text_io.split_words(every)[0]) > 800  # the punctuation and CJK stand alone


def test_word_tag_records_from_signature_outputs():
    text = "在北京 ok"
    outputs = {"num_words": np.array([4, 0]), "word_starts": np.array([[0, 1, 2, 4], [-1] * 4]),
               "word_ends": np.array([[1, 2, 3, 6], [-1] * 4]),
               "word_tags": np.array([[b"O", b"B-LOC", b"I-LOC", b"O"], [b""] * 4])}
    assert text_io.word_tag_records([text, ""], outputs) == [
        {"words": ["在", "北", "京", "ok"], "tags": ["O", "B-LOC", "I-LOC", "O"],
         "offsets": [[0, 1], [1, 2], [2, 3], [4, 6]],
         "entities": [{"type": "LOC", "start": 1, "end": 3, "text": "北京"}]},
        {"words": [], "tags": [], "offsets": [], "entities": []}]
    outputs["word_tags"][0] = [b"O", b"I-LOC", b"I-LOC", b"O"]  # written in the scheme
    first = {k: v[:1] for k, v in outputs.items()}
    assert text_io.word_tag_records([text], first, "BMES")[0]["tags"] == [
        "O", "B-LOC", "E-LOC", "O"]
    with pytest.raises(UserError, match="2 texts but outputs for 1"):
        text_io.word_tag_records([text, ""], {k: v[:1] for k, v in outputs.items()})
    with pytest.raises(UserError, match="outputs lack num_words, word_starts, word_ends, "
                                        "word_tags: pass the serve_text outputs of a tagging"):
        text_io.word_tag_records([text], {"logits": np.zeros((1, 2, 3))})


def test_entities_are_character_spans_of_the_original_text():
    text = "  江泽民，在北京 会见992XR用户"
    words, spans = text_io.split_words(text)
    tags = ["B-PER", "I-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O", "O", "O", "O",
            "O", "B-ORG", "I-ORG", "O", "O"]
    assert len(tags) == len(words)
    assert text_io.tagged_entities(text, spans, tags) == [
        {"type": "PER", "start": 2, "end": 5, "text": "江泽民"},
        {"type": "LOC", "start": 7, "end": 9, "text": "北京"},
        {"type": "ORG", "start": 15, "end": 17, "text": "XR"}]


def test_predict_tags_each_character_from_fake_outputs(tmp_path):
    config = micro_config("conll", f"train_file={_write_conll(tmp_path / 't.conll')}")
    task = get_task(config)
    task.prepare(task.load("train"))
    tok = WordPieceTokenizer.from_file(_vocab_dir(tmp_path) + "/vocab.txt")
    examples = task.examples_from_inputs(["  江泽民在北京会见李鹏。"])
    assert examples[0]["words"] == list("江泽民在北京会见李鹏。")
    features = task.featurize(examples, tok, 32, training=False)
    names = task.label_names
    wanted = ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "O", "B-PER", "I-PER", "O"]
    tags = np.zeros(32, np.int32)
    for word, position in enumerate(features[0]["_word_positions"]):
        tags[position] = names.index(wanted[word])
    record, = task.predict(examples, features, [{"tags": tags}])
    assert record["tags"] == wanted  # one per character
    assert record["offsets"] == [[i, i + 1] for i in range(2, 13)]
    assert record["entities"] == [
        {"type": "PER", "start": 2, "end": 5, "text": "江泽民"},
        {"type": "LOC", "start": 6, "end": 8, "text": "北京"},
        {"type": "PER", "start": 10, "end": 12, "text": "李鹏"}]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A micro model fine-tuned on the character-level CoNLL SENTENCES."""
    root = tmp_path_factory.mktemp("chinese_tagging")
    dev = _write_conll(root / "dev.conll")
    config = micro_config("conll", f"train_file={_write_conll(root / 'train.conll', repeat=8)}",
                          f"validation_file={dev}", f"test_file={dev}",
                          f"tokenizer={_vocab_dir(root)}", "num_train_epochs=3",
                          # (this 1-layer H=32 model memorising 3 sentences in 9 steps
                          # learns them from a zero bias; from the label prior it took
                          # more than 24 steps; docs/chinese.md, "Small NER sets")
                          "label_prior_bias=false", "learning_rate=3e-3")
    with shared_compilation_cache(str(root.parent / "finetune_jax_cache")):
        job.finetune(config, str(root / "run"))
    return str(root / "run")


@pytest.mark.long
def test_raw_chinese_text_end_to_end(workdir, tmp_path, capsys):
    texts = ["江泽民在北京会见李鹏", "他说：新华社在上海 ok"]
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
        assert cli.predict_main(["--model", workdir, "--input", str(tmp_path / "in.txt")]) == 0
        records = inference.load_finetuned(workdir).predict(texts)
        export.export(workdir, str(tmp_path / "out"), formats=("jax",), platforms=("cpu",))
        served = export.ServedModel(str(tmp_path / "out")).tag_texts(texts)
    printed = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()[-2:]]
    assert printed == records == served
    assert records[0]["words"] == list(texts[0]) and len(records[0]["tags"]) == len(texts[0])
    assert records[1]["words"] == ["他", "说", "：", "新", "华", "社", "在", "上", "海", "o", "k"]
    assert records[1]["offsets"][-2:] == [[10, 11], [11, 12]]
    for text, record in zip(texts, records):
        for entity in record["entities"]:
            assert text[entity["start"]:entity["end"]] == entity["text"]
    assert records[0]["entities"], records  # the training sentence itself is learned


@pytest.mark.slow
def test_saved_model_tags_raw_text_like_predict(workdir, tmp_path):
    """The SavedModel's serve_text: the words, tags and character offsets of
    `Finetuned.predict` and `ServedModel.tag_texts` (jax export), in one TF graph."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)
    texts = ["江泽民在北京会见了代表团", "Apple 公司在 California.", "新华社记者在上海报道",
             "He said: \"Hello, world!\" (it's 3.5 ok)…", "中国人民银行，ok！"]
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        records = inference.load_finetuned(workdir).predict(texts)
        export.export(workdir, str(tmp_path / "out"), platforms=("cpu",))
        served = export.ServedModel(str(tmp_path / "out")).tag_texts(texts)
    signature = tf.saved_model.load(str(tmp_path / "out" / "saved_model")).signatures
    out = {k: v.numpy() for k, v in signature["serve_text"](text=tf.constant(texts)).items()}
    assert text_io.word_tag_records(texts, out, "IOB2") == served == records
    for i, record in enumerate(records):
        n = out["num_words"][i]
        assert [w.decode() for w in out["words"][i][:n]] == record["words"]
        spans = [(int(s), int(e)) for s, e in zip(out["word_starts"][i][:n],
                                                  out["word_ends"][i][:n])]
        assert spans == text_io.split_words(texts[i])[1]
    assert records[1]["words"] == [*"Apple公司在California."]
    assert records[3]["words"][:5] == ["He", "said", ":", "\"", "Hello"]
    assert records[2]["entities"], records  # a training sentence: its entities are learned


@pytest.mark.long
def test_bmes_file_fine_tunes_and_predicts_in_bmes(tmp_path):
    """A B/M/E/S file (MSRA, Weibo, Resume): scored by entity F1, its scheme kept in the
    model, predictions written in B/M/E/S."""
    path = tmp_path / "train.conll"
    with open(path, "w", encoding="utf-8") as f:
        for text, tags in SENTENCES * 8:
            spans = text_io.entities([tags.split()])
            bmes = text_io.encode_entities(spans, len(text), "BMES")
            f.write("".join(f"{c}\t{t}\n" for c, t in zip(text, bmes)) + "\n")
    assert "M-ORG" in path.read_text(encoding="utf-8")
    config = micro_config("conll", f"train_file={path}", f"validation_file={path}",
                          f"test_file={path}", f"tokenizer={_vocab_dir(tmp_path)}",
                          "num_train_epochs=3", "learning_rate=3e-3",
                          "label_prior_bias=false")  # as in `workdir` above
    workdir = str(tmp_path / "run")
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        results = job.finetune(config, workdir)
        records = inference.load_finetuned(workdir).predict(["江泽民在北京会见李鹏"])
    assert {"f1", "precision", "recall", "f1_PER"} <= set(results["test"])
    assert results["test"]["f1"] > 0  # learned some entities: F1, not token accuracy
    with open(os.path.join(workdir, "predictions", "test.conll"), encoding="utf-8") as f:
        predicted = [line.split("\t")[1].strip() for line in f if line.strip()]
    assert {t[0] for t in predicted} <= set("BMESO")
    tags = records[0]["tags"]
    assert set(t[0] for t in tags) <= set("BMESO") and text_io.rewrite_tags(tags, "BMES") == tags
