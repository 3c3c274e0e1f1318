"""Label values checked as a class, by one rule for every task family (issue 66): labels and
tags compared after stripping surrounding whitespace, a dev or test label training did not
see refused in the same words by classification, tagging and multiple choice, NaN and
infinite regression targets refused naming file:line, and a model of one family given
another family's input file told so in one line instead of a KeyError."""

from __future__ import annotations

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.finetune import tasks
from bert_jax.models.presets import preset
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
from bert_jax.weights import pretrained

from helpers.finetune import SENTENCES, micro_config, write_conll
from helpers.words import assert_failure_line


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(DEFAULT_VOCAB)


def _task(name, *overrides):
    return tasks.get_task(micro_config(name, *overrides))


def _prepared(name, *overrides):
    task = _task(name, *overrides)
    task.prepare(task.load("train"))
    return task


SPAM = ["free money now", "hello there", "see you soon", "win a prize"]
LABELS = ["spam", "ham", "ham ", " spam"]


def _write_table(path, texts, labels, text="text", label="label"):
    """A classification file in the format of `path`'s extension (.csv, .tsv, .jsonl)."""
    if str(path).endswith(".jsonl"):
        body = "".join(json.dumps({text: t, label: y}) + "\n" for t, y in zip(texts, labels))
    else:
        sep = "\t" if str(path).endswith(".tsv") else ","
        body = f"{text}{sep}{label}\n" + "".join(f"{t}{sep}{y}\n" for t, y in zip(texts, labels))
    path.write_text(body, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl", "headerless"])
def test_classification_labels_are_compared_stripped(tmp_path, ext):
    """Cases: 'ham' and 'ham ' (and 'spam', ' spam') in a CSV, a TSV, a JSONL file and a
    headerless label<TAB>text file (--config.columns) make two classes, not four; a dev
    label with surrounding spaces is one of them."""
    if ext == "headerless":
        train = tmp_path / "train.txt"
        train.write_text("".join(f"{y}\t{t}\n" for t, y in zip(SPAM, LABELS)), encoding="utf-8")
        dev = tmp_path / "dev.txt"
        dev.write_text("ham  \thi\n", encoding="utf-8")
        task = _prepared("csv", f"train_file={train}", f"validation_file={dev}",
                         "columns=label,text")
    else:
        train = _write_table(tmp_path / f"train.{ext}", SPAM, LABELS)
        dev = _write_table(tmp_path / f"dev.{ext}", ["hi"], ["  ham"])
        task = _prepared("csv", f"train_file={train}", f"validation_file={dev}")
    assert task.label_names == ["ham", "spam"]
    task.check_labels(task.load("validation"))  # no error: ' ham' is 'ham'


def test_glue_tagging_and_choice_labels_are_compared_stripped(tmp_path):
    """Cases: a GLUE MNLI file whose gold_label has a trailing space ('entailment '), a CoNLL
    tag followed by spaces and a tab ('B-LOC \\t'), a multiple-choice label ' 1 '."""
    mnli = tmp_path / "glue_data" / "MNLI"
    mnli.mkdir(parents=True)
    header = "index\tsentence1\tsentence2\tgold_label\n"
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        (mnli / name).write_text(header + "0\ta cat\ta pet\tentailment \n"
                                 "1\ta dog\tno animal\t contradiction\n", encoding="utf-8")
    glue = _task("mnli", f"glue_dir={tmp_path / 'glue_data'}")
    assert [ex["label"] for ex in glue.load("train")] == [
        glue.label_names.index("entailment"), glue.label_names.index("contradiction")]

    conll = tmp_path / "train.conll"
    conll.write_text("Paris B-LOC \t\nis O\n\nRome  B-LOC\n", encoding="utf-8")
    tagging = _prepared("conll", f"train_file={conll}")
    assert sorted(tagging.label_names) == ["B-LOC", "O"]

    choices = tmp_path / "swag.csv"
    choices.write_text("sent1,sent2,ending0,ending1,label\nA cat,It,sleeps,flies, 1 \n",
                       encoding="utf-8")
    choice = _task("multiple_choice", f"train_file={choices}", "ending_columns=ending0,ending1")
    assert [ex["label"] for ex in choice.load("train")] == [1]


def _unseen(tmp_path, family):
    """(task, dev examples) whose dev file has one label or tag that training has not."""
    if family == "classification":
        train = _write_table(tmp_path / "train.csv", SPAM, LABELS)
        dev = _write_table(tmp_path / "dev.csv", ["hi", "buy now"], ["ham", "eggs"])
        task = _prepared("csv", f"train_file={train}", f"validation_file={dev}")
        return task, task.load("validation"), f"label 'eggs' is not among the training labels " \
            f"['ham', 'spam'] ({dev}:3)"
    if family == "tagging":
        train = write_conll(tmp_path / "train.conll", SENTENCES)
        dev = tmp_path / "dev.conll"
        dev.write_text("Mary B-PER\nsings O\n\nAcme B-ORG\nrocks B-MISC\n", encoding="utf-8")
        task = _prepared("conll", f"train_file={train}", f"validation_file={dev}")
        return task, task.load("validation"), "tag 'B-MISC' is not among the training tags " \
            f"['O', 'B-LOC', 'B-PER', 'B-ORG', 'I-ORG', 'I-PER'] ({dev}:5)"
    train = tmp_path / "train.csv"
    train.write_text("sent1,sent2,ending0,ending1,label\nA cat,It,sleeps,flies,0\n"
                     "A dog,It,barks,sings,1\n", encoding="utf-8")
    dev = tmp_path / "dev.csv"
    dev.write_text("sent1,sent2,ending0,ending1,ending2,label\nA fish,It,swims,runs,talks,2\n",
                   encoding="utf-8")
    task = _task("multiple_choice", f"train_file={train}", f"validation_file={dev}",
                 "ending_columns=ending0,ending1,ending2")
    task.prepare(_task("multiple_choice", f"train_file={train}",
                       "ending_columns=ending0,ending1").load("train"))
    return task, task.load("validation"), f"label 2 is not among the training labels [0, 1] " \
        f"({dev}:2)"


@pytest.mark.parametrize("family", ["classification", "tagging", "multiple_choice"])
def test_a_dev_label_training_has_not_is_refused_in_the_same_words(tmp_path, family,
                                                                   tokenizer):
    """Cases: an unseen dev label in a classification CSV ('eggs'), an unseen dev tag in a
    CoNLL file ('B-MISC'), a multiple-choice dev label (2) past training's 2 endings; each
    refused by check_labels and when featurized for evaluation, naming the label, the
    training's labels and file:line in the words of `base.unseen_label`."""
    task, examples, message = _unseen(tmp_path, family)
    with pytest.raises(UserError) as checked:
        task.check_labels(examples)
    assert message in str(checked.value)
    assert "the model never learned it; correct the" in str(checked.value)
    with pytest.raises(UserError) as featurized:
        task.featurize(examples, tokenizer, 32, training=False)
    assert str(featurized.value) == str(checked.value)


@pytest.mark.parametrize("label_type", ["regression", "auto"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "Infinity"])
def test_nan_and_infinite_regression_targets_are_refused(tmp_path, label_type, value):
    """Cases: a training target nan, inf, -inf, NaN or Infinity among numbers with fractions,
    with label_type regression and auto (regression inferred): one UserError naming
    file:line and the value (not 'cannot convert float NaN to integer', nor a diverged
    run)."""
    train = _write_table(tmp_path / "train.csv", SPAM, ["0.5", "1.25", value, "3.5"])
    task = _task("csv", f"train_file={train}", f"label_type={label_type}")
    with pytest.raises(UserError, match=f"^{train}:4: regression label '{value}' is not a "
                       "finite number"):
        task.prepare(task.load("train"))


@pytest.mark.parametrize("value", ["nan", "-inf"])
def test_nan_and_infinite_dev_targets_are_refused(tmp_path, value):
    """Cases: a validation target nan or -inf for a regression trained on finite numbers:
    refused by check_labels naming the dev file's line and the value."""
    train = _write_table(tmp_path / "train.csv", SPAM, ["0.5", "1.25", "2.0", "3.5"])
    dev = _write_table(tmp_path / "dev.csv", ["hi", "yo"], ["1.5", value])
    task = _prepared("csv", f"train_file={train}", f"validation_file={dev}")
    assert task.is_regression
    with pytest.raises(UserError, match=f"^{dev}:3: regression label '{value}'"):
        task.check_labels(task.load("validation"))


def test_model_of_another_family_names_what_the_model_is(tmp_path, tokenizer):
    """Cases: a tagging task's read_inputs on a classification CSV without a 'text' column and
    on a JSONL file of {'sms', 'label'} rows, and that CSV as its validation file (evaluate
    --file); a classification task's read_inputs on a .conll file and on JSONL token lists.
    Each one line saying what the model is."""
    conll = write_conll(tmp_path / "train.conll", SENTENCES)
    tagger = _prepared("conll", f"train_file={conll}")
    table = _write_table(tmp_path / "sms.csv", SPAM, LABELS, text="sms")
    with pytest.raises(UserError, match=r"^the 'conll' model is a token tagging model "
                       r"\(conll-style tags: O, B-LOC, .*\); --input .*sms.csv has no 'text' "
                       r"column \(its columns: 'sms', 'label'\)"):
        tagger.read_inputs(table)
    rows = _write_table(tmp_path / "sms.jsonl", SPAM, LABELS, text="sms")
    with pytest.raises(UserError, match=r"sms.jsonl:1 has no 'tokens', 'words' or 'text'"):
        tagger.read_inputs(rows)

    tagger.config.validation_file = table  # as `evaluate --file sms.csv` reads it
    with pytest.raises(UserError, match=r"sms.csv is a CSV table, but the 'conll' model is a "
                       "token tagging model, which reads CoNLL column files"):
        tagger.load("validation")

    train = _write_table(tmp_path / "train.csv", SPAM, LABELS)
    classifier = _prepared("csv", f"train_file={train}")
    with pytest.raises(UserError, match=r"is a text classification model \(labels: ham, "
                       r"spam\); --input .*train.conll is a CoNLL file"):
        classifier.read_inputs(conll)
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text(json.dumps({"tokens": ["Mary", "sings"]}) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="tokens.jsonl holds token lists"):
        classifier.read_inputs(str(tokens))


def _tagging_model(path, train):
    """A micro tagging model directory as fine-tuning saves one (its task and config), with
    zeros for parameters: predict refuses the input before running it."""
    config = micro_config("conll", f"train_file={train}", f"validation_file={train}")
    task = tasks.get_task(config)
    task.prepare(task.load("train"))
    tokenizer = load_tokenizer(DEFAULT_VOCAB)
    bert_config = preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=1,
                         hidden_size=32, num_attention_heads=2, intermediate_size=64)
    ids = jnp.ones((1, 4), jnp.int32)
    shapes = jax.eval_shape(task.model(bert_config).init, jax.random.key(0), ids)["params"]
    params = jax.tree.map(lambda leaf: np.zeros(leaf.shape, leaf.dtype), nn.unbox(shapes))
    pretrained.save(path, bert_config, params,
                    tokenizer=tokenizer, task={**task.spec(), "config": config.to_dict()})
    return path


def test_predict_with_a_tagging_model_on_a_classification_csv_exits_2(tmp_path, capsys):
    """Cases: `bert-jax predict --model TAGGER --input sms.csv` (columns sms, label) with a
    micro tagging model directory: exit 2 and one line naming --model and what it is, not
    'error: text' (a KeyError)."""
    model = _tagging_model(str(tmp_path / "tagger"),
                           write_conll(tmp_path / "train.conll", SENTENCES))
    table = _write_table(tmp_path / "sms.csv", SPAM, LABELS, text="sms")
    capsys.readouterr()
    assert cli.main(["predict", "--model", model, "--input", table]) == 2
    error = capsys.readouterr().err
    assert_failure_line(error, "predict")
    assert f"error: --model {model} is a token tagging model (conll-style tags: " in error
    assert f"--input {table} has no 'text' column" in error


@pytest.mark.parametrize("name, overrides, keys", [
    ("csv", ["label_column=text"], ("text_column", "label_column")),
    ("csv", ["text_pair_column=text"], ("text_column", "text_pair_column")),
    ("csv", ["text_pair_column=label"], ("text_pair_column", "label_column")),
    ("multiple_choice", ["label_column=sent1"], ("context_column", "label_column")),
    ("multiple_choice", ["question_column=ending1"], ("question_column", "ending_columns")),
])
def test_one_column_in_two_roles_is_refused(name, overrides, keys):
    """Cases: a CSV task whose label (or second text) column is its text column, or whose
    second text is its label; a multiple-choice task whose label is its context, or whose
    question is one of its endings: one UserError naming both keys, before any file is read."""
    with pytest.raises(UserError, match=rf"^--config\.{keys[0]} and --config\.{keys[1]} both "
                       "name column '.*': a column plays one role"):
        _task(name, *overrides)
