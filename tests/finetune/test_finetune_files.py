"""The fine-tuning file readers: what they accept, and bad files failing with the file,
the line and the problem rather than a bare decoder error or silently shifted data."""

from __future__ import annotations

import json

import pytest

from bert_jax.finetune import files
from bert_jax.finetune.tasks import squad


def write(path, data: bytes | str):
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return str(path)


def test_tables_in_every_format(tmp_path):
    tsv = write(tmp_path / "a.tsv", "\ufefflabel\ttext\nspam\tWIN £100 now\nham\tsee you\n")
    csv_ = write(tmp_path / "a.csv", 'label,text\nham,"two\nlines, one field"\n')
    jsonl = write(tmp_path / "a.jsonl", json.dumps({"text": "a\u2028b", "label": 1},
                                                   ensure_ascii=False) + "\n\n")
    text = write(tmp_path / "a.txt", "first\r\nsecond\n\nthird")
    # The byte-order mark of a spreadsheet export is not part of the first column's name.
    assert files.read_table(tsv) == ([{"label": "spam", "text": "WIN £100 now"},
                                      {"label": "ham", "text": "see you"}], ["label", "text"])
    assert files.read_table(csv_)[0] == [{"label": "ham", "text": "two\nlines, one field"}]
    # U+2028 is a line break to str.splitlines but a plain character inside JSON.
    assert files.read_table(jsonl) == ([{"text": "a\u2028b", "label": 1}], ["text", "label"])
    assert [r["text"] for r in files.read_table(text)[0]] == ["first", "second", "third"]


def test_non_utf8_file_names_the_line_and_byte(tmp_path):
    path = write(tmp_path / "latin1.tsv",
                 "label\ttext\nham\tfine\nham\tcaf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.tsv:3: not UTF-8 text \(byte 0xe9 at offset "
                                         r"27\); convert it to UTF-8 first"):
        files.read_table(path)
    conll = write(tmp_path / "latin1.conll", "Jos\xe9 B-PER\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.conll:1: not UTF-8"):
        files.read_conll(conll)


@pytest.mark.parametrize("line, fields", [("spam\ttext with\ta tab", 3), ("spam", 1)])
def test_tsv_row_with_wrong_field_count_names_its_line(tmp_path, line, fields):
    path = write(tmp_path / "bad.tsv", f"label\ttext\nham\tgood\n{line}\n")
    with pytest.raises(ValueError, match=rf"bad.tsv:3: {fields} fields, but the header has 2 "
                                         r"\(a tab inside a text\?\)"):
        files.read_table(path)


def test_bad_jsonl_lines_name_their_line(tmp_path):
    broken = write(tmp_path / "broken.jsonl", '{"text": "ok"}\n{"text": "no end\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not valid JSON .*one JSON object "
                                         "per line"):
        files.read_table(broken)
    array = write(tmp_path / "array.jsonl", '{"text": "ok"}\n["text"]\n')
    with pytest.raises(ValueError, match=r"array.jsonl:2: expected a JSON object, got list"):
        files.read_table(array)


def test_conll_token_without_tag_inside_a_tagged_sentence(tmp_path):
    good = write(tmp_path / "good.conll", "-DOCSTART- O\n\nMary B-PER\nsings O\n\nHi O")
    assert files.read_conll(good) == [{"words": ["Mary", "sings"], "tags": ["B-PER", "O"]},
                                      {"words": ["Hi"], "tags": ["O"]}]
    untagged = write(tmp_path / "words.conll", "Mary\nsings\n")
    assert files.read_conll(untagged) == [{"words": ["Mary", "sings"], "tags": None}]
    # Without the check, every later tag of the sentence would belong to the wrong word.
    bad = write(tmp_path / "bad.conll", "Mary B-PER\nsings\nwell O\n")
    with pytest.raises(ValueError, match=r"bad.conll:2: tokens with and without a tag in "
                                         r"one sentence \(at 'sings'\)"):
        files.read_conll(bad)
    first_untagged = write(tmp_path / "first.conll", "Mary\nsings O\n")
    with pytest.raises(ValueError, match=r"first.conll:2: tokens with and without a tag"):
        files.read_conll(first_untagged)


def test_malformed_squad_json(tmp_path):
    syntax = write(tmp_path / "syntax.json", '{"data": [\n  {"paragraphs": }\n]}')
    with pytest.raises(ValueError, match=r"syntax.json:2: not valid JSON"):
        squad.read_squad_json(syntax)
    no_id = write(tmp_path / "no_id.json", json.dumps(
        {"data": [{"paragraphs": [{"context": "c", "qas": [{"question": "q?"}]}]}]}))
    with pytest.raises(ValueError, match=r"no_id.json is not in the SQuAD format: an entry "
                                         "lacks the key 'id'"):
        squad.read_squad_json(no_id)
    with pytest.raises(ValueError, match="no top-level 'data'"):
        squad.read_squad_json(write(tmp_path / "list.json", "[]"))
