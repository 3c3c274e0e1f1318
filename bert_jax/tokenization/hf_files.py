"""The tokenizer files of a Hugging Face model directory, read and written.

Read (`read_hf_tokenizer`), in this order: BERT's `vocab.txt` (BERT, DistilBERT, ELECTRA;
casing from tokenizer_config.json), ALBERT's `spiece.model`, a `tokenizer.json` (RoBERTa,
XLM-R, CamemBERT, ModernBERT, EuroBERT: exactly what transformers loads), XLM-R's or
CamemBERT's `sentencepiece.bpe.model` with fairseq's ids, RoBERTa's byte-level BPE
`vocab.json` + `merges.txt`. Written (`write_hf_tokenizer`, for `convert --to_hf`): each
kind's own files and a tokenizer_config.json that `AutoTokenizer.from_pretrained` reads
back to the same ids.
"""
import json
from typing import Any, Dict, List, Optional, Tuple

from bert_jax.errors import UserError
from bert_jax.host import encoding, paths
from bert_jax.tokenization.albert_text import AlbertNormalization
from bert_jax.tokenization.base import Tokenizer, TokenizerError
from bert_jax.tokenization.json_tokenizer import JSON_FILE, JsonTokenizer
from bert_jax.tokenization.sentencepiece_tokenizer import SentencePieceTokenizer
from bert_jax.tokenization.wordpiece import WordPieceTokenizer

HF_CONFIG = "tokenizer_config.json"
FAIRSEQ_SPM = "sentencepiece.bpe.model"
# transformers' tokenizer class of each fairseq SentencePiece layout.
_LAYOUT_CLASSES = {"xlm-roberta": "XLMRobertaTokenizer", "camembert": "CamembertTokenizer"}
# tokenizer_config.json's names of the special tokens bert_jax uses, by kind.
_CONFIG_KEYS = {"pad": ("pad_token",), "unk": ("unk_token",), "cls": ("cls_token", "bos_token"),
                "sep": ("sep_token", "eos_token"), "mask": ("mask_token",)}


def _read_json(path: str) -> Dict[str, Any]:
    return encoding.read_json(path) if paths.exists(path) else {}


def _token_name(value) -> Optional[str]:
    """A tokenizer_config.json special token: a string or an AddedToken's dict."""
    return value.get("content") if isinstance(value, dict) else value


def config_specials(settings: Dict[str, Any]) -> Dict[str, str]:
    """{kind: token} of the special tokens a tokenizer_config.json names."""
    found = {}
    for kind, keys in _CONFIG_KEYS.items():
        names = [_token_name(settings.get(key)) for key in keys]
        names = [n for n in names if isinstance(n, str)]
        if names:
            found[kind] = names[0]
    return found


def byte_level_bpe(vocab_json: str, merges_txt: str) -> str:
    """tokenizer.json text of RoBERTa's byte-level BPE files.

    Built as transformers' RobertaTokenizer builds it: no prefix space, `<s> A </s></s> B </s>`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = json.loads(paths.read_text(vocab_json))
    merges = [tuple(line.split(" ")) for line in paths.read_text(merges_txt).splitlines()
              if line and not line.startswith("#version")]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, continuing_subword_prefix="",
                                     end_of_word_suffix="", fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = [n for n in ("<s>", "<pad>", "</s>", "<unk>") if n in vocab]
    tokenizer.add_special_tokens([AddedToken(n, special=True) for n in specials])
    if "<mask>" in vocab:
        tokenizer.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    if "<s>" not in vocab or "</s>" not in vocab:
        raise TokenizerError(f"{vocab_json} has no <s> or </s> token: RoBERTa's rows need both")
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", vocab["</s>"]),
                                                            ("<s>", vocab["<s>"]))
    return tokenizer.to_str()


def read_hf_tokenizer(hf_dir: str) -> Tuple[Tokenizer, str]:
    """(tokenizer, the file it came from) of an HF model directory, as AutoTokenizer reads it.

    The order is transformers' AutoTokenizer's (see the module docstring)."""
    settings = _read_json(paths.join(hf_dir, HF_CONFIG))
    model_type = _read_json(paths.join(hf_dir, "config.json")).get("model_type")
    file = lambda name: paths.join(hf_dir, name)  # noqa: E731
    if paths.exists(file("vocab.txt")):
        return (WordPieceTokenizer.from_file(file("vocab.txt"),
                                             bool(settings.get("do_lower_case", True))),
                file("vocab.txt"))
    if paths.exists(file("spiece.model")):
        if not settings.get("remove_space", True):
            raise UserError(f"{hf_dir}/{HF_CONFIG} sets remove_space=false: bert_jax's "
                            "ALBERT preprocessing always collapses whitespace")
        albert = AlbertNormalization(do_lower_case=bool(settings.get("do_lower_case", True)),
                                     keep_accents=bool(settings.get("keep_accents", False)))
        return SentencePieceTokenizer(file("spiece.model"), albert=albert), file("spiece.model")
    if paths.exists(file(JSON_FILE)):
        return JsonTokenizer(file(JSON_FILE), config_specials(settings)), file(JSON_FILE)
    if paths.exists(file(FAIRSEQ_SPM)):
        camembert = model_type == "camembert" or str(
            settings.get("tokenizer_class", "")).startswith("Camembert")
        return (SentencePieceTokenizer(file(FAIRSEQ_SPM),
                                       layout="camembert" if camembert else "xlm-roberta"),
                file(FAIRSEQ_SPM))
    if paths.exists(file("vocab.json")) and paths.exists(file("merges.txt")):
        text = byte_level_bpe(file("vocab.json"), file("merges.txt"))
        return (JsonTokenizer(file("vocab.json"), config_specials(settings), text=text),
                file("vocab.json"))
    raise FileNotFoundError(f"{hf_dir} has no tokenizer files (vocab.txt, spiece.model, "
                            f"tokenizer.json, {FAIRSEQ_SPM} or vocab.json + merges.txt)")


def write_hf_tokenizer(tokenizer: Tokenizer, directory: str,
                       settings: Dict[str, Any]) -> List[str]:
    """Writes the tokenizer's own files and a tokenizer_config.json in `directory`.

    The config holds `settings` (model_max_length, ...) plus the class and special tokens
    transformers needs. Returns notes for the user (what could not be written)."""
    names = {f"{kind}_token": tokenizer.id_to_token(i)
             for kind, i in tokenizer.special_ids().items()}
    settings = dict(settings)
    if isinstance(tokenizer, JsonTokenizer):
        paths.write_text(paths.join(directory, JSON_FILE), tokenizer.to_json())
        settings.update(tokenizer_class="PreTrainedTokenizerFast", **names)
    elif isinstance(tokenizer, SentencePieceTokenizer) and tokenizer.layout is not None:
        with paths.open(paths.join(directory, FAIRSEQ_SPM), "wb") as f:
            f.write(tokenizer.model_bytes)
        settings.update(tokenizer_class=_LAYOUT_CLASSES[tokenizer.layout],
                        bos_token="<s>", eos_token="</s>", **names)
    elif isinstance(tokenizer, SentencePieceTokenizer):
        if tokenizer.albert is None:
            return ["transformers' BERT tokenizer reads WordPiece vocabularies only: the "
                    "SentencePiece model was not exported"]
        with paths.open(paths.join(directory, "spiece.model"), "wb") as f:
            f.write(tokenizer.model_bytes)
        settings.update(tokenizer_class="AlbertTokenizer",
                        do_lower_case=tokenizer.albert.do_lower_case,
                        keep_accents=tokenizer.albert.keep_accents)
    else:
        paths.write_text(paths.join(directory, "vocab.txt"), "".join(
            tokenizer.id_to_token(i) + "\n" for i in range(tokenizer.vocab_size)))
        settings.update(tokenizer_class="BertTokenizer", do_lower_case=tokenizer.do_lower_case)
    paths.write_text(paths.join(directory, HF_CONFIG), json.dumps(settings, indent=2))
    return []
