"""EuroBERT (RMSNorm, SwiGLU, rotary positions, grouped-query attention: options of the one
encoder) against transformers' EuroBertModel / EuroBertForMaskedLM on the same random
weights (float32), its HF conversion both ways, and the EuroBERT, Ettin and mmBERT names
through a local Hub server with tokenizer files of their published kinds."""

import json

import jax
import numpy as np
import pytest

from bert_jax.models.config import ConfigError
from bert_jax.models.encoder import BertModel
from bert_jax.models.heads import BertForPreTraining
from bert_jax.weights import hf
from bert_jax.weights.config_json import from_hf_dict, to_hf_dict

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
transformers = pytest.importorskip("transformers")

from helpers.parity import (  # noqa: E402
    TOL,
    assert_hidden_states_match,
    assert_mlm_model_matches,
    scale_weights,
)
from helpers.parity import state_dict_numpy as state_dict  # noqa: E402

SPECIAL_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, mask_token_id=3)
SIZES = [
    # Grouped-query attention: 4 query heads read 2 key/value heads.
    dict(vocab_size=101, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
         num_key_value_heads=2, intermediate_size=48, max_position_embeddings=128,
         rope_parameters={"rope_type": "default", "rope_theta": 250000.0}),
    # One key/value head per query head, biases on, another eps and base.
    dict(vocab_size=300, hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
         num_key_value_heads=6, intermediate_size=64, max_position_embeddings=128,
         attention_bias=True, mlp_bias=True, rms_norm_eps=1e-6,
         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
]


def reference(size: int, seed: int, **changes):
    """(transformers EuroBertForMaskedLM with every weight random, our config read from its
    config.json fields)."""
    torch.manual_seed(seed)
    hf_config = transformers.EuroBertConfig(**{**SIZES[size], **changes}, **SPECIAL_IDS)
    hf_config._attn_implementation = "eager"
    model = scale_weights(transformers.EuroBertForMaskedLM(hf_config).eval())
    return model, from_hf_dict(hf_config.to_dict())


def batch(vocab_size, lengths, max_len, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocab_size, (len(lengths), max_len)).astype(np.int32)
    mask = (np.arange(max_len)[None] < np.array(lengths)[:, None]).astype(np.int32)
    return ids * mask, mask


def torch_args(ids, mask):
    return dict(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(mask, dtype=torch.long))


# Rows of 70 tokens: past 64, the length below which rotary angles are small.
UNPADDED, PADDED = [70, 70], [70, 33, 5]
CASES = [pytest.param(0, False, PADDED, id="gqa-unrolled-padded"),
         pytest.param(0, True, UNPADDED, id="gqa-scanned-unpadded", marks=pytest.mark.slow),
         pytest.param(1, True, PADDED, id="mha-bias-scanned-padded"),
         pytest.param(1, False, UNPADDED, id="mha-bias-unrolled-unpadded",
                      marks=pytest.mark.slow)]


@pytest.mark.parametrize("size, scan, lengths", CASES)
def test_outputs_match_transformers(size, scan, lengths):
    """The last hidden states (after the final norm), every layer's, and the MLM logits,
    at the real tokens."""
    ref, config = reference(size, seed=1)
    config = config.replace(scan_layers=scan)
    ids, mask = batch(config.vocab_size, lengths, 70)
    with torch.no_grad():
        expected = ref(**torch_args(ids, mask), output_hidden_states=True)
        hidden = ref.model(**torch_args(ids, mask)).last_hidden_state
    params = hf.params_from_hf(state_dict(ref), config)
    assert_mlm_model_matches(config, params, ids, mask, hidden.numpy(), expected.logits.numpy())
    assert_hidden_states_match(config, params, ids, mask, expected.hidden_states)


def test_fused_attention_reads_grouped_heads_as_the_einsum_path():
    """attention_impl="fused" gives the einsum path's states with kv heads < heads."""
    ref, config = reference(0, seed=2)
    params = hf.params_from_hf(state_dict(ref), config)["bert"]
    ids, mask = batch(config.vocab_size, [40, 17], 40)
    want = BertModel(config, add_pooling_layer=False).apply({"params": params}, ids, mask)
    got = BertModel(config.replace(attention_impl="fused"), add_pooling_layer=False).apply(
        {"params": params}, ids, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(got.sequence_output)[real],
                               np.asarray(want.sequence_output)[real], atol=1e-5)


def test_export_loads_in_transformers_to_the_same_outputs(tmp_path):
    """save_hf_dir writes EuroBERT's config.json + model.safetensors (its own untied
    lm_head) that transformers loads to the logits of the model it came from; reading
    them back gives the same config and tensors."""
    ref, config = reference(0, seed=3)
    params = hf.params_from_hf(state_dict(ref), config)
    hf.save_hf_dir(tmp_path, config, params)
    loaded = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path, attn_implementation="eager").eval()
    assert type(loaded).__name__ == "EuroBertForMaskedLM"
    ids, mask = batch(config.vocab_size, [30, 12], 30)
    with torch.no_grad():
        np.testing.assert_allclose(loaded(**torch_args(ids, mask)).logits.numpy(),
                                   ref(**torch_args(ids, mask)).logits.numpy(), atol=1e-5)
    config_back, params_back = hf.load_hf_dir(tmp_path)
    assert config_back == config
    jax.tree.map(np.testing.assert_array_equal, params_back, params)


@pytest.mark.slow  # half a minute: two training runs
def test_grouped_heads_train_on_a_mixed_mesh_like_one_device():
    """Data, FSDP and tensor parallelism at once (8 fake devices) train a EuroBERT with 2
    key/value heads for 8 query heads exactly like one device: the key/value projections
    are replicated over the tensor axis, their repeated heads sharded as the queries'."""
    from helpers.states import run

    config = from_hf_dict({"model_type": "eurobert", "vocab_size": 128, "hidden_size": 32,
                           "num_hidden_layers": 1, "num_attention_heads": 8,
                           "num_key_value_heads": 2, "intermediate_size": 64,
                           "max_position_embeddings": 32})
    losses, params, state = run({"data": 2, "fsdp": 2, "tensor": 2}, config=config)
    ref_losses, ref_params, _ = run({"data": 1}, devices=jax.devices()[:1], config=config)
    np.testing.assert_allclose(losses, ref_losses, atol=1e-5, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5),
                 params, ref_params)
    layer = state.params["bert"]["encoder"]["layer_0"]["attention"]
    assert layer["key"]["kernel"].sharding.spec[1] is None
    assert layer["query"]["kernel"].sharding.spec[1] == "tensor"


# EuroBERT-210m's config.json as published (written by transformers 4.48 for its remote code).
EUROBERT_210M = {
    "architectures": ["EuroBertForMaskedLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "clf_pooling": "late", "eos_token_id": 128001, "head_dim": 64,
    "hidden_act": "silu", "hidden_dropout": 0.0, "hidden_size": 768, "initializer_range": 0.02,
    "intermediate_size": 3072, "mask_token_id": 128002, "max_position_embeddings": 8192,
    "mlp_bias": False, "model_type": "eurobert", "num_attention_heads": 12,
    "num_hidden_layers": 12, "num_key_value_heads": 12, "pad_token_id": 128001,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 250000,
    "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": False,
    "vocab_size": 128256}


def test_the_published_config_reads_as_transformers_reads_it():
    """EuroBERT-210m's config.json (top-level rope_theta, rope_scaling null) gives the
    rotary base, norm eps and heads transformers' EuroBertConfig takes from it."""
    config = from_hf_dict(EUROBERT_210M)
    theirs = transformers.EuroBertConfig(**EUROBERT_210M)
    assert config.rope_theta == theirs.rope_parameters["rope_theta"] == 250000
    assert (config.layer_norm_eps, config.kv_heads, config.head_dim) == (
        theirs.rms_norm_eps, theirs.num_key_value_heads, theirs.head_dim)
    assert (config.vocab_size, config.type_vocab_size, config.use_bias) == (128256, 0, False)
    assert from_hf_dict(to_hf_dict(config)) == config


@pytest.mark.parametrize("change, words", [
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}, "rope"),
    ({"head_dim": 16}, "head_dim"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings"),
    ({"attention_bias": True}, "attention_bias"),
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
])
def test_what_the_encoder_cannot_express_is_refused_in_one_line(change, words):
    values = {"model_type": "eurobert", **SIZES[0], **change}
    with pytest.raises(ConfigError, match=words) as error:
        from_hf_dict(values)
    assert "\n" not in str(error.value)


# --- by name: EuroBERT, Ettin and mmBERT, offline -------------------------------------

def llama3_tokenizer_json(path, vocab_size: int):
    """A byte-level BPE tokenizer.json of EuroBERT's kind (Llama-3's: a regex split, then
    bytes; `<|begin_of_text|> A <|end_of_text|>` rows; `<|mask|>`), `vocab_size` ids."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"]
    tok = Tokenizer(models.BPE())
    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
             r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["the cat sat on the mat", "a dog ran far away, 1234!"] * 10,
                            trainers.BpeTrainer(vocab_size=vocab_size - len(specials),
                                                initial_alphabet=pre_tokenizers.ByteLevel
                                                .alphabet()))
    tok.add_special_tokens([AddedToken(s, special=True) for s in specials])
    fill_with_unused(tok, vocab_size, "<|reserved_special_token_{}|>")
    bos, eos = (tok.token_to_id(s) for s in specials[:2])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A <|end_of_text|>",
        pair="<|begin_of_text|> $A <|end_of_text|> $B <|end_of_text|>",
        special_tokens=[("<|begin_of_text|>", bos), ("<|end_of_text|>", eos)])
    tok.save(str(path))
    return {"bos_token": specials[0], "eos_token": specials[1], "pad_token": specials[1],
            "mask_token": specials[2], "tokenizer_class": "PreTrainedTokenizerFast"}


def fill_with_unused(tok, vocab_size: int, name: str):
    """Special tokens `name` up to `vocab_size` ids (as Llama-3 and Gemma reserve them)."""
    from tokenizers import AddedToken

    unused = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    tok.add_special_tokens([AddedToken(name.format(i), special=True) for i in range(unused)])
    assert tok.get_vocab_size(with_added_tokens=True) == vocab_size


def gemma_tokenizer_json(path, vocab_size: int):
    """A tokenizer.json of mmBERT's kind (Gemma's: BPE over `▁`-joined text with byte
    fallback; <pad> <eos> <bos> <unk> <mask> as ids 0-4; `<bos> A <eos>` rows)."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        normalizers,
        processors,
        trainers,
    )

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    tok.train_from_iterator(["the cat sat on the mat", "ein Hund lief weit weg", "猫が座った"] * 10,
                            trainers.BpeTrainer(vocab_size=120, special_tokens=specials))
    tok.add_special_tokens([AddedToken(s, special=True) for s in specials])
    fill_with_unused(tok, vocab_size, "<unused{}>")
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
        special_tokens=[("<bos>", 2), ("<eos>", 1)])
    tok.save(str(path))
    return {"bos_token": "<bos>", "eos_token": "<eos>", "cls_token": "<bos>",
            "sep_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
            "mask_token": "<mask>", "tokenizer_class": "GemmaTokenizer"}


# The published config.json of each, with its shapes scaled down (as transformers 4.x
# wrote them: ModernBERT's global_rope_theta / local_rope_theta, no rope_parameters).
MODERNBERT_PUBLISHED = dict(
    architectures=["ModernBertForMaskedLM"], model_type="modernbert", attention_bias=False,
    attention_dropout=0.0, classifier_activation="gelu", classifier_bias=False,
    classifier_dropout=0.0, classifier_pooling="mean", decoder_bias=True,
    deterministic_flash_attn=False, embedding_dropout=0.0, global_attn_every_n_layers=3,
    global_rope_theta=160000.0, hidden_activation="gelu", initializer_cutoff_factor=2.0,
    initializer_range=0.02, layer_norm_eps=1e-5, local_attention=16, local_rope_theta=160000.0,
    mlp_bias=False, mlp_dropout=0.0, norm_bias=False, norm_eps=1e-5,
    position_embedding_type="sans_pos", repad_logits_with_grad=False,
    sparse_pred_ignore_index=-100, sparse_prediction=False, torch_dtype="float32",
    hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48)
ETTIN = dict(MODERNBERT_PUBLISHED, vocab_size=128, max_position_embeddings=7999,
             bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2, pad_token_id=3,
             transformers_version="4.48.2")
MMBERT = dict(MODERNBERT_PUBLISHED, vocab_size=400, max_position_embeddings=8192,
              bos_token_id=2, cls_token_id=2, eos_token_id=1, sep_token_id=1, pad_token_id=0,
              mask_token_id=4, transformers_version="4.55.0")


def publish(directory, model, config_json: dict | None, tokenizer_config: dict):
    """An HF directory as the Hub has it: the weights transformers saves, the published
    config.json (when given) and tokenizer_config.json; its files by name."""
    model.save_pretrained(directory)
    if config_json is not None:
        (directory / "config.json").write_text(json.dumps(config_json))
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def modernbert_reference(config_json: dict, seed: int):
    torch.manual_seed(seed)
    hf_config = transformers.ModernBertConfig(**config_json)
    hf_config._attn_implementation = "eager"
    return scale_weights(transformers.ModernBertForMaskedLM(hf_config).eval())


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """Publishes {name: files} on a local Hub server (HF_ENDPOINT) while the test runs."""
    from helpers.hub_server import HubServer, Repo

    servers = []

    def serve(repos):
        server = HubServer({name: Repo({"c" * 40: files}, {"main": "c" * 40})
                            for name, files in repos.items()})
        servers.append(server)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    yield serve
    for server in servers:
        server.close()


@pytest.mark.long
def test_the_published_names_load_to_transformers_outputs_and_ids(tmp_path, hub):
    """hf:EuroBERT/EuroBERT-210m, hf:jhu-clsp/ettin-encoder-150m and hf:jhu-clsp/mmBERT-base
    (small random models with their published config.json and tokenizer kinds) load to
    transformers' MLM logits on the same files, and their tokenizers to its ids and
    special tokens."""
    from bert_jax.tokenization import load_tokenizer
    from bert_jax.weights import pretrained

    from helpers.tokenizers import bpe_tokenizer_json

    models, repos = {}, {}
    for name, config_json, seed in (("EuroBERT/EuroBERT-210m", None, 4),
                                    ("jhu-clsp/ettin-encoder-150m", ETTIN, 5),
                                    ("jhu-clsp/mmBERT-base", MMBERT, 6)):
        d = tmp_path / name.split("/")[1]
        d.mkdir()
        if config_json is None:  # EuroBERT: the config.json transformers writes
            model = reference(0, seed, vocab_size=300)[0]  # 256 bytes, merges, specials
            tokenizer_config = llama3_tokenizer_json(d / "tokenizer.json", 300)
        elif name.startswith("jhu-clsp/ettin"):  # ModernBERT's tokenizer
            model = modernbert_reference(config_json, seed)
            bpe_tokenizer_json(d / "tokenizer.json", 128)
            tokenizer_config = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                                "mask_token": "[MASK]", "unk_token": "[UNK]",
                                "tokenizer_class": "PreTrainedTokenizerFast"}
        else:
            model = modernbert_reference(config_json, seed)
            tokenizer_config = gemma_tokenizer_json(d / "tokenizer.json", MMBERT["vocab_size"])
        repos[name] = publish(d, model, config_json, tokenizer_config)
        models[name] = (model, d)
    hub(repos)
    text = "the cat sat far away, 1234! ein Hund 猫"
    for name, (model, directory) in models.items():
        loaded = pretrained.load(f"hf:{name}")
        theirs = transformers.AutoTokenizer.from_pretrained(directory)
        ours = load_tokenizer(loaded.tokenizer_dir)
        assert ours.encode(text).ids == theirs.encode(text, add_special_tokens=False), name
        assert (ours.cls_id, ours.sep_id, ours.mask_id, ours.pad_id) == (
            theirs.cls_token_id if theirs.cls_token else theirs.bos_token_id,
            theirs.sep_token_id if theirs.sep_token else theirs.eos_token_id,
            theirs.mask_token_id, theirs.pad_token_id), name
        reread = transformers.AutoModelForMaskedLM.from_pretrained(
            directory, attn_implementation="eager").eval()
        ids, mask = batch(loaded.config.vocab_size, [40, 21], 40)
        with torch.no_grad():
            want = reread(**torch_args(ids, mask)).logits.numpy()
        config = loaded.config
        params = dict(loaded.params)
        model_ = BertForPreTraining(config, next_sentence_prediction=False)
        params["bert"] = dict(params["bert"], pooler=model_.init(
            jax.random.PRNGKey(0), ids[:, :8])["params"]["bert"]["pooler"])
        got = model_.apply({"params": params}, ids, mask).mlm_logits
        real = mask.astype(bool)
        np.testing.assert_allclose(np.asarray(got)[real], want[real], atol=TOL, rtol=TOL,
                                   err_msg=name)
    # Back to transformers' format with mmBERT's own special token ids, not ModernBERT's.
    from bert_jax.weights.convert import to_hf

    to_hf("hf:jhu-clsp/mmBERT-base", str(tmp_path / "mmbert-back"))
    written = json.loads((tmp_path / "mmbert-back" / "config.json").read_text())
    assert [written[f"{k}_token_id"] for k in ("pad", "cls", "sep", "mask")] == [0, 2, 1, 4]


def test_convert_embed_and_back_through_the_cli(tmp_path):
    """`convert --from_hf` of a EuroBERT directory with its tokenizer files, then `embed
    --pooling mean` equals transformers' mean-pooled last hidden states on the ids its
    tokenizer gives; `convert --to_hf` writes what transformers reloads to the same
    logits and ids (special token ids in config.json from the tokenizer)."""
    from bert_jax import cli

    directory = tmp_path / "hf"
    directory.mkdir()
    model = reference(0, seed=8, vocab_size=300)[0]
    publish(directory, model, None, llama3_tokenizer_json(directory / "tokenizer.json", 300))
    converted, back = tmp_path / "converted", tmp_path / "back"
    assert cli.main(["convert", "--from_hf", str(directory), "--output", str(converted)]) == 0
    texts = ["the cat sat on the mat", " a dog ran far away, 1234!  and then more words here"]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    vectors = tmp_path / "vectors.npy"
    assert cli.main(["embed", "--model", str(converted), "--input", str(tmp_path / "texts.txt"),
                     "--output", str(vectors), "--pooling", "mean"]) == 0
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model.model(**inputs).last_hidden_state
        logits = model(**inputs).logits
    weights = inputs["attention_mask"][..., None].float()
    np.testing.assert_allclose(np.load(vectors), ((states * weights).sum(1) / weights.sum(1)),
                               atol=TOL, rtol=TOL)
    assert cli.main(["convert", "--model", str(converted), "--to_hf", str(back)]) == 0
    reloaded = transformers.AutoModelForMaskedLM.from_pretrained(back).eval()
    assert transformers.AutoTokenizer.from_pretrained(back)(texts)["input_ids"] == tokenizer(
        texts)["input_ids"]
    assert reloaded.config.mask_token_id == tokenizer.mask_token_id
    with torch.no_grad():
        np.testing.assert_allclose(reloaded(**inputs).logits, logits, atol=1e-5)


@pytest.mark.slow  # about a minute: the fine-tuning job end to end
def test_a_converted_eurobert_fine_tunes(tmp_path):
    """A classifier fine-tuned from a converted EuroBERT (a pooler of its own, since
    EuroBERT has none) runs and reports its accuracy."""
    from bert_jax import cli

    from helpers.finetune import fine_tune_briefly

    directory = tmp_path / "hf"
    directory.mkdir()
    publish(directory, reference(0, seed=9, vocab_size=300)[0], None,
            llama3_tokenizer_json(directory / "tokenizer.json", 300))
    out = tmp_path / "converted"
    assert cli.main(["convert", "--from_hf", str(directory), "--output", str(out)]) == 0
    results = fine_tune_briefly(out, tmp_path)
    assert 0 <= results["validation"]["accuracy"] <= 1
