"""Each encoder family's tokenizer files give transformers' ids: every line of a varied
text, and the family's sentence-pair rows (`tokenizer(a, b)`), read from the files
transformers saves; `--to_hf`'s writer gives files transformers reads back the same.

Tiny tokenizers are trained here on the test text (tokenizers' trainers, SentencePiece's
unigram trainer, as XLM-R's and CamemBERT's models are unigram)."""
import os

import numpy as np
import pytest

from bert_jax.tokenization import load_tokenizer
from bert_jax.tokenization.hf_files import read_hf_tokenizer, write_hf_tokenizer
from bert_jax.tokenization.text_io import encode_pair

transformers = pytest.importorskip("transformers")
from helpers.tokenizers import CORPUS, LINES, family_files  # noqa: E402

# (transformers reads an empty second text as no second text; bert_jax keeps the pair row)
PAIRS = [(LINES[0], LINES[2]), (LINES[3], LINES[4]), (LINES[8], LINES[1]),
         (LINES[5], LINES[9]), (LINES[9], LINES[5])]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    """{family: HF directory holding only that family's own tokenizer files}."""
    root = tmp_path_factory.mktemp("families")
    dirs = {}
    for name in FAMILIES:
        dirs[name] = str(root / name)
        os.makedirs(dirs[name])
        family_files(name, dirs[name])
    return dirs


FAMILIES = ["roberta", "roberta-json", "xlm-roberta", "camembert", "distilbert", "electra",
            "eurobert"]


def _assert_same(ours, theirs, family):
    for line in LINES:
        expected = theirs(line, add_special_tokens=False)["input_ids"]
        assert ours.encode(line).ids == expected, (family, line)
        assert ours.encode_ids([line]) == [expected], (family, line)
    for a, b in PAIRS:
        expected = theirs(a, b, return_token_type_ids=True)
        ids, segments = encode_pair(ours, a, b, 512)
        assert ids == expected["input_ids"], (family, a, b)
        assert segments == expected["token_type_ids"], (family, a, b)
        ids, segments = encode_pair(ours, a, None, 512)
        assert ids == theirs(a)["input_ids"], (family, a)
        for length in (9, 14):  # longest-first truncation, the odd token included
            expected = theirs(a, b, truncation="longest_first", max_length=length,
                              return_token_type_ids=True)
            assert encode_pair(ours, a, b, length) == (
                expected["input_ids"], expected["token_type_ids"]), (family, a, b, length)


@pytest.mark.parametrize("family", FAMILIES)
def test_ids_and_pairs_equal_transformers(family_dirs, family, tmp_path):
    folder = family_dirs[family]
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    ours, _ = read_hf_tokenizer(folder)
    _assert_same(ours, theirs, family)
    for kind in ("cls", "sep", "pad", "mask"):  # the family's own special tokens
        name = getattr(theirs, f"{kind}_token") or (
            theirs.bos_token if kind == "cls" else theirs.eos_token)
        assert ours.special_id(kind) == theirs.convert_tokens_to_ids(name), (family, kind)
    # a bert_jax model directory keeps it, and `--to_hf`'s files give transformers' ids
    ours.save(str(tmp_path / "saved"))
    again = load_tokenizer(str(tmp_path / "saved"))
    assert again.fingerprint() == ours.fingerprint()
    _assert_same(again, theirs, family)
    exported = str(tmp_path / "hf")
    os.makedirs(exported)
    assert write_hf_tokenizer(again, exported, {"model_max_length": 512}) == []
    _assert_same(again, transformers.AutoTokenizer.from_pretrained(exported), family)


def test_fairseq_layouts(family_dirs):
    """XLM-R: <s>=0 <pad>=1 </s>=2 <unk>=3, pieces shifted by one, <mask> last;
    CamemBERT: its four unused-or-special tokens and <unk>NOTUSED first, <mask> last."""
    xlmr, _ = read_hf_tokenizer(family_dirs["xlm-roberta"])
    assert [xlmr.cls_id, xlmr.pad_id, xlmr.sep_id, xlmr.unk_id] == [0, 1, 2, 3]
    assert xlmr.mask_id == xlmr.vocab_size - 1 == 200 + 1
    camembert, _ = read_hf_tokenizer(family_dirs["camembert"])
    assert camembert.convert_ids_to_tokens(range(5)) == [
        "<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED"]
    assert (camembert.cls_id, camembert.sep_id) == (5, 6)
    assert camembert.mask_id == camembert.vocab_size - 1 == 200 + 4


def test_in_graph_rows_equal_python(family_dirs):
    """What an exported SavedModel runs: XLM-R's fairseq ids from tensorflow-text's
    SentencePiece, and each family's rows built in TF ops, equal the Python ones."""
    tf = pytest.importorskip("tensorflow")
    xlmr, _ = read_hf_tokenizer(family_dirs["xlm-roberta"])
    texts = [line for line in LINES if line.strip()]
    pieces = xlmr.tf_tokenize(tf.constant(texts))
    assert pieces.to_list() == xlmr.encode_ids(texts)
    for family in ("xlm-roberta", "distilbert", "eurobert"):
        ours, _ = read_hf_tokenizer(family_dirs[family])
        a, b = ([ours.encode(t).ids for t in column] for column in zip(*PAIRS))
        ragged = [tf.ragged.constant(x, tf.int32) for x in (a, b)]
        for parts in (ragged, ragged[:1]):
            ids, segments = ours.pair_format.tf_build(parts)
            rows = [ours.build_inputs(*row) for row in zip(a, b)] if len(parts) == 2 else \
                [ours.build_inputs(row) for row in a]
            assert ids.to_list() == [r[0] for r in rows], family
            assert segments.to_list() == [r[1] for r in rows], family


# --- end to end: convert a family's model with its tokenizer files, fine-tune, embed ---

_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=128)


def _reference_model(family):
    """A small random transformers model of the family, on its test tokenizer's vocab."""
    import torch
    torch.manual_seed(0)
    if family == "electra":
        return transformers.ElectraForMaskedLM(
            transformers.ElectraConfig(vocab_size=300, embedding_size=16, **_SMALL))
    if family != "eurobert":  # each the size of its test tokenizer
        small = (dict(_SMALL, max_position_embeddings=130) if family != "distilbert" else
                 dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128))
        config = transformers.AutoConfig.for_model(
            family, vocab_size={"roberta": 400, "xlm-roberta": 202, "camembert": 205,
                                "distilbert": 300}[family], **small)
        return transformers.AutoModelForMaskedLM.from_config(config)
    config = transformers.AutoConfig.for_model(  # ids of write_eurobert_like's specials
        "eurobert", vocab_size=400, bos_token_id=0, eos_token_id=1, mask_token_id=2,
        pad_token_id=3, **_SMALL)
    return transformers.AutoModelForMaskedLM.from_config(config)


@pytest.mark.slow  # about a minute a family: the fine-tuning job end to end
@pytest.mark.parametrize("family", ["roberta", "xlm-roberta", "camembert", "distilbert",
                                    "electra", "eurobert"])
def test_converted_family_fine_tunes_on_pairs_and_embeds_as_transformers(
        family_dirs, family, tmp_path):
    """convert --from_hf of a transformers-saved model with the family's own tokenizer
    files, and back with --to_hf (tokenizer files transformers reads to the same ids); a
    pair classifier fine-tuned from it (the family's pair rows); `embed --pooling mean`
    equal to transformers' mean-pooled states of its tokenizer's ids."""
    import shutil

    import torch

    from bert_jax import cli
    from bert_jax.finetune import job

    from helpers.finetune import micro_config, shared_compilation_cache

    hf_dir, out = tmp_path / "hf", tmp_path / "converted"
    shutil.copytree(family_dirs[family], hf_dir)
    ref = _reference_model(family).eval()
    ref.save_pretrained(hf_dir)
    assert cli.main(["convert", "--from_hf", str(hf_dir), "--output", str(out)]) == 0
    theirs = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    _assert_same(load_tokenizer(str(out)), theirs, family)
    back = tmp_path / "back"  # --to_hf: the family's tokenizer files, read to the same ids
    assert cli.main(["convert", "--model", str(out), "--to_hf", str(back)]) == 0
    _assert_same(load_tokenizer(str(out)),
                 transformers.AutoTokenizer.from_pretrained(str(back)), family)

    lines = [line for line in LINES if line.strip() and not {"\t", "\n"} & set(line)]
    train = tmp_path / "train.tsv"
    train.write_text("label\ta\tb\n" + "".join(
        f"{'yes' if i % 2 else 'no'}\t{lines[i % 5]}\t{lines[(i + 2) % len(lines)]}\n"
        for i in range(8)), encoding="utf-8")
    finetune = micro_config("csv", f"init_from={out}", "model=", f"train_file={train}",
                            f"validation_file={train}", "text_column=a",
                            "text_pair_column=b", "label_column=label",
                            "max_train_examples=8", "num_train_epochs=1")
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        results = job.finetune(finetune, str(tmp_path / "run"))
    assert 0 <= results["validation"]["accuracy"] <= 1
    if family != "eurobert":  # (its task classes put another head before the classifier)
        classifier = tmp_path / "classifier"  # the family's *ForSequenceClassification
        assert cli.main(["convert", "--model", str(tmp_path / "run"), "--to_hf",
                         str(classifier)]) == 0
        loaded, info = transformers.AutoModelForSequenceClassification.from_pretrained(
            str(classifier), output_loading_info=True)
        assert type(loaded).__name__.endswith("ForSequenceClassification")
        assert not info["missing_keys"] and not info["unexpected_keys"], info

    texts, vectors = tmp_path / "texts.txt", tmp_path / "vectors.npy"
    texts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli.main(["embed", "--model", str(out), "--input", str(texts), "--output",
                     str(vectors), "--pooling", "mean"]) == 0
    for line, vector in zip(lines, np.load(vectors)):
        ids = torch.tensor([theirs(line)["input_ids"]])
        with torch.no_grad():
            states = ref.base_model(input_ids=ids).last_hidden_state[0].numpy()
        np.testing.assert_allclose(vector, states.mean(0), atol=1e-4, err_msg=line)


@pytest.mark.slow  # a short pretraining run
@pytest.mark.parametrize("family", ["xlm-roberta", "distilbert"])
def test_further_pretraining_takes_the_models_architecture(family_dirs, family, tmp_path):
    """`pretrain --config.init_from=CONVERTED --config.model=''`: MLM-only pretraining
    continues the converted model (its family's architecture and tokenizer; a fresh pooler
    where the checkpoint has none), and `--to_hf` writes it back as the family's
    *ForMaskedLM, which transformers loads whole."""
    import shutil

    from bert_jax import cli
    from bert_jax.pretrain.job import train_and_evaluate

    from helpers.pretrain import small_config

    hf_dir, out, run = tmp_path / "hf", tmp_path / "converted", tmp_path / "run"
    shutil.copytree(family_dirs[family], hf_dir)
    _reference_model(family).save_pretrained(hf_dir)
    assert cli.main(["convert", "--from_hf", str(hf_dir), "--output", str(out)]) == 0
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(LINES[i:i + 4]) for i in range(8)) + "\n",
                      encoding="utf-8")
    result = train_and_evaluate(small_config(str(corpus), model="", init_from=str(out),
                                             next_sentence_prediction=False), str(run))
    assert np.isfinite(result["train"]["loss"])
    back = tmp_path / "back"
    assert cli.main(["convert", "--model", str(run), "--to_hf", str(back)]) == 0
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(
        str(back), output_loading_info=True)
    assert type(loaded).__name__ == type(_reference_model(family)).__name__
    assert not info["missing_keys"] and not info["unexpected_keys"], info


def test_pretraining_rows_use_the_family_special_tokens(family_dirs, tmp_path):
    """create-data with RoBERTa's tokenizer (MLM-only, FULL-SENTENCES rows): each row is
    `<s> ... </s>`, documents joined by `</s>`, masked positions hold `<mask>`."""
    tf = pytest.importorskip("tensorflow")
    import glob

    from bert_jax.data import cli as data_cli
    from bert_jax.data import tfrecord
    tokenizer, _ = read_hf_tokenizer(family_dirs["roberta"])
    tokenizer.save(str(tmp_path / "tokenizer"))
    text = tmp_path / "in.txt"
    text.write_text("\n\n".join("\n".join(LINES[i:i + 3]) for i in (0, 3, 8)) + "\n",
                    encoding="utf-8")
    assert data_cli.create_data_main([
        "--input", str(text), "--output", str(tmp_path / "out"), "--tokenizer",
        str(tmp_path / "tokenizer"), "--num_shards", "1", "--dupe_factor", "2",
        "--max_seq_length", "32", "--num_workers", "1", "--no_progress",
        "--no_next_sentence_prediction"]) == 0
    [path] = glob.glob(str(tmp_path / "out" / "*.tfrecord"))
    masked = 0
    for record in tfrecord.read_records(path):
        features = tf.train.Example.FromString(record).features.feature
        ids = np.array(features["input_ids"].int64_list.value)
        length = int(np.sum(features["input_mask"].int64_list.value))
        assert ids[0] == tokenizer.cls_id == 0 and ids[length - 1] == tokenizer.sep_id == 2
        masked += int(np.sum(ids[:length] == tokenizer.mask_id))
    assert masked > 0 and tokenizer.mask_id == 4


def test_a_fairseq_layout_needs_the_sentence_pieces(tmp_path):
    """CamemBERT's ids take <s> and </s> from the model: one without them is refused in
    one line naming them."""
    import sentencepiece as spm

    from bert_jax.tokenization import SentencePieceTokenizer, TokenizerError
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS),
                                   model_prefix=str(tmp_path / "plain"), vocab_size=100,
                                   bos_id=-1, eos_id=-1, minloglevel=2)
    with pytest.raises(TokenizerError, match="no <s> or </s> piece") as error:
        SentencePieceTokenizer(str(tmp_path / "plain.model"), layout="camembert")
    assert len(str(error.value).splitlines()) == 1


def test_squad_and_tagging_rows_in_the_roberta_format(family_dirs, tmp_path):
    """SQuAD windows are `<s> question </s></s> context </s>`, all segment 0, and the
    labeled spans still give back every exact answer; a tagging row is `<s> words </s>`
    with each word's label at its first token (`Ġword`, whether or not its offsets
    include the space)."""
    from bert_jax.finetune import files, tasks

    from helpers.finetune import SENTENCES, micro_config, write_conll
    from helpers.squad import oracle_outputs, squad_json
    tokenizer, _ = read_hf_tokenizer(family_dirs["roberta"])
    config = micro_config("squad", f"validation_file={squad_json(tmp_path / 'dev.json', False)}",
                          "max_seq_length=40", "doc_stride=16", "max_query_length=12")
    task = tasks.get_task(config)
    examples = task.load("validation")
    features = task.featurize(examples, tokenizer, 40, training=True)
    for feature in features:
        ids = feature["input_ids"]
        query = tokenizer.encode(examples[feature["_example_index"]]["question"]).ids[:12]
        assert ids[:len(query) + 3] == [0, *query, 2, 2] and ids[-1] == 2
        assert set(feature["segment_ids"]) == {0} and len(ids) <= 40
    assert task.evaluate(examples, features, oracle_outputs(features))["exact_match"] == 100

    sentences = files.read_conll(write_conll(tmp_path / "train.conll", SENTENCES))
    task = tasks.get_task(micro_config("conll", f"train_file={tmp_path / 'train.conll'}"))
    task.prepare(sentences)
    sentence = sentences[0]
    for family in ("roberta", "eurobert"):  # offsets trimmed of the space before, or not
        tokenizer, _ = read_hf_tokenizer(family_dirs[family])
        [feature] = task.featurize([sentence], tokenizer, 64, training=True)
        ids = feature["input_ids"]
        assert ids[0] == tokenizer.cls_id and ids[-1] == tokenizer.sep_id
        tokens = tokenizer.encode(" ".join(sentence["words"])).tokens  # a word: Ġ first
        assert list(np.flatnonzero(feature["label_weights"])) == [
            i + 1 for i, token in enumerate(tokens) if i == 0 or token.startswith("Ġ")]
