"""lab/tiny's checkpoint at both sizes: the constraints each engine puts on the tiny shape (with
their sources), the full-size shape's arithmetic (without writing 18.6 GB), and what a written
tiny checkpoint holds."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors import safe_open
from tokenizers import Tokenizer

from lab import checkpoint as real_checkpoint
from lab.tiny import build_checkpoint, plan_weights
from lab.tiny.shape import QWEN36_27B, TINY, text_config
from lab.tiny.tokenizer import FILLER, SPECIAL, build_tokenizer
from lab.tiny.weights import DTYPE_BYTES, Planned, save_safetensors, shard_plan

SHAPES = (TINY, QWEN36_27B)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_gdn_key_head_dim_equals_value_head_dim(shape):
    """vLLM 0.22.1's fused GDN prefill kernel (fla/ops/fused_gdn_prefill_post_conv.py) fails to
    compile for key head dim 32 / value head dim 64: tests/fixtures/vllm-cuda/
    fail-gdn-prefill-k32-v64.log. The real 27B has 128 = 128."""
    assert shape.lin_k_dim == shape.lin_v_dim
    log = "tests/fixtures/vllm-cuda/fail-gdn-prefill-k32-v64.log"
    with open(log, encoding="utf-8") as f:
        assert "Mismatched type for mask_2d" in f.read()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_every_pipeline_stage_of_two_keeps_a_full_attention_layer(shape):
    """A 4-layer hybrid model fails vLLM's page-size check under pipeline parallel 2 (upstream
    vllm#51752): each stage needs a full-attention layer. Qwen3.6's pattern: every 4th layer."""
    types = shape.layer_types
    half = shape.num_layers // 2
    assert shape.num_layers % 2 == 0
    for stage in (types[:half], types[half:]):
        assert "full_attention" in stage, stage
    assert [i for i, t in enumerate(types) if t == "full_attention"] == list(
        range(3, shape.num_layers, 4)
    )


def test_tiny_is_eight_layers_with_full_attention_at_3_and_7():
    assert TINY.layer_types == ["linear_attention"] * 3 + ["full_attention"] + [
        "linear_attention"
    ] * 3 + ["full_attention"]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_tensor_parallel_2_splits_heads_and_int4_groups(shape):
    """TP 2 splits key, value and KV heads evenly, and each rank of the INT4 out_proj / o_proj /
    down_proj keeps whole AutoRound groups (a rank with less than a group kills the CPU worker:
    tests/fixtures/vllm-cpu/fail-tp2-on-2-cores.log's neighbour, lab-worker-died-tp2.log)."""
    for heads in (shape.lin_k_heads, shape.lin_v_heads, shape.kv_heads, shape.heads):
        assert heads % 2 == 0
    for in_features in (shape.value_dim, shape.heads * shape.head_dim, shape.intermediate):
        assert (in_features // 2) % shape.group == 0
    assert shape.lin_v_heads % shape.lin_k_heads == 0
    rotary = shape.head_dim * shape.partial_rotary
    assert sum(shape.mrope_section) * 2 == rotary


def test_full_size_config_is_the_real_checkpoints_text_config():
    """The full-size shape's config.json text_config equals lab/checkpoint.py's (the real 27B's
    published values) in every size field: one shape, not two that drift."""
    ours = text_config(build_tokenizer(), QWEN36_27B)
    real = real_checkpoint.text_config()
    token_ids = {"eos_token_id", "bos_token_id", "pad_token_id"}
    differ = {
        k: (ours.get(k), v) for k, v in real.items() if k not in token_ids and ours.get(k) != v
    }
    assert set(differ) <= {"architectures"}, differ


def _int4_bytes(out_f: int, in_f: int, group: int = 128) -> int:
    """qweight + scales (F16) + qzeros + g_idx of an AutoRound/GPTQ int4 linear."""
    return in_f * out_f // 2 + (in_f // group) * out_f * 2 + (in_f // group) * out_f // 2 + in_f * 4


def test_full_size_arithmetic():
    """Qwen3.6-27B's text shape, INT4: parameters and bytes, computed here from the published
    sizes, match the planned tensors; the bytes are the 18.64 GB the H200 run wrote (2026-12-01)."""
    s = QWEN36_27B
    w = plan_weights("hybrid-int4", s)
    h, inter, v = s.hidden, s.intermediate, s.vocab
    key, value = s.lin_k_heads * s.lin_k_dim, s.lin_v_heads * s.lin_v_dim
    conv = 2 * key + value
    assert (key, value, conv) == (2048, 6144, 10240)
    mlp = [(inter, h), (inter, h), (h, inter)]
    gdn = [(conv, h), (value, h), (h, value)]
    attn = [(2 * 24 * 256, h), (4 * 256, h), (4 * 256, h), (h, 24 * 256)]
    n_full = s.num_layers // 4
    n_gdn = s.num_layers - n_full
    quantized = n_gdn * sum(o * i for o, i in gdn + mlp) + n_full * sum(
        o * i for o, i in attn + mlp
    )
    int4 = n_gdn * sum(_int4_bytes(o, i) for o, i in gdn + mlp) + n_full * sum(
        _int4_bytes(o, i) for o, i in attn + mlp
    )
    planned_int4 = sum(
        t.nbytes
        for n, t in w.t.items()
        if n.rsplit(".", 1)[-1] in ("qweight", "qzeros", "scales", "g_idx")
    )
    assert planned_int4 == int4
    counted = dict(w.params())
    assert sum(n for k, n in counted.items() if k.endswith(".qweight")) == quantized
    assert quantized == 48 * 382_730_240 + 16 * 372_244_480 == 24_326_963_200
    # 16-bit: embeddings and lm_head (2 x 248320 x 5120), the MTP head, in_proj_a/b, norms...
    assert w.t["lm_head.weight"].shape == (v, h) and w.t["lm_head.weight"].dtype == "BF16"
    assert w.nbytes() == 18_640_793_728
    assert round(w.nbytes() / 1e9, 2) == 18.64
    total_params = sum(counted.values())
    assert 27.0e9 < total_params < 28.0e9  # "27B" with the MTP head


def test_full_size_has_the_mtp_head_in_bf16():
    w = plan_weights("hybrid-int4", QWEN36_27B)
    h = QWEN36_27B.hidden
    assert w.t["mtp.fc.weight"].shape == (h, 2 * h)
    assert w.t["mtp.layers.0.self_attn.q_proj.weight"].shape == (2 * 24 * 256, h)
    assert not [n for n in w.t if n.startswith("mtp.") and n.endswith(".qweight")]


def test_full_size_shards_stay_under_the_limit_unless_one_tensor_is_larger():
    w = plan_weights("hybrid-int4", QWEN36_27B)
    shards = shard_plan(w.t, 1 << 30)
    assert sum(len(s) for s in shards) == len(w.t)
    for part in shards:
        size = sum(t.nbytes for t in part.values())
        assert size <= 1 << 30 or len(part) == 1, (size, list(part)[:3])
    assert 14 <= len(shards) <= 20


def test_random_values_are_bounded_and_typed():
    """Random BF16 values lie in +-[2**-6, 2**-5); an INT4 qweight is int32 of its planned
    shape; scales are F16 and positive."""
    w = plan_weights("hybrid-int4", QWEN36_27B)
    a = w.t["model.language_model.layers.0.linear_attn.in_proj_a.weight"].make()
    f = (a.astype(np.uint32) << 16).view(np.float32)
    assert a.shape == (48, 5120) and 2**-6 <= np.abs(f).min() and np.abs(f).max() < 2**-5
    q = w.t["model.language_model.layers.0.mlp.down_proj.qweight"]
    assert q.make().dtype == np.int32 and q.shape == (17408 // 8, 5120)
    sc = w.t["model.language_model.layers.0.mlp.down_proj.scales"].make()
    assert sc.dtype == np.float16 and (sc > 0).all()


def test_save_refuses_a_tensor_that_is_not_what_was_planned(tmp_path):
    bad = Planned("F32", (2, 2), lambda: np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="x: made float32"):
        save_safetensors({"x": bad}, tmp_path / "x.safetensors")


@pytest.fixture(scope="module")
def tiny_int4(tmp_path_factory):
    return build_checkpoint(tmp_path_factory.mktemp("tiny") / "int4", "hybrid-int4")


def test_tiny_checkpoint_files_match_their_index(tiny_int4):
    index = json.loads((tiny_int4 / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in tiny_int4.glob("*.safetensors"))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    seen, total = {}, 0
    for shard in shards:
        with safe_open(str(tiny_int4 / shard), "np") as f:
            for name in f.keys():
                seen[name] = shard
                sl = f.get_slice(name)
                total += math.prod(sl.get_shape()) * DTYPE_BYTES[sl.get_dtype()]
    assert seen == index["weight_map"]
    assert total == index["metadata"]["total_size"]


def test_tiny_checkpoint_config_has_the_fixed_shape(tiny_int4):
    cfg = json.loads((tiny_int4 / "config.json").read_text())["text_config"]
    assert cfg["num_hidden_layers"] == 8 and len(cfg["layer_types"]) == 8
    assert cfg["linear_key_head_dim"] == cfg["linear_value_head_dim"] == 32
    with safe_open(str(tiny_int4 / "model-00002-of-00002.safetensors"), "np") as f:
        names = set(f.keys())
    with safe_open(str(tiny_int4 / "model-00001-of-00002.safetensors"), "np") as f:
        names |= set(f.keys())
    conv = "model.language_model.layers.4.linear_attn.conv1d.weight"
    assert conv in names and "model.language_model.layers.7.self_attn.q_proj.qweight" in names


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_the_tokenizer_decodes_every_id_the_model_can_emit(shape):
    """A random-weight model samples any id below config.json's vocab_size; an id the tokenizer
    lacks decodes to nothing (the full-size run on the H200 answered ``content`` None and
    streamed no text, tests/fixtures/vllm-cuda/h200-runs). Every id but the special tokens
    decodes to text, and encoding still yields the trained tokens, never a filler."""
    tok = build_tokenizer(shape.vocab)
    assert tok.get_vocab_size() == shape.vocab
    texts = tok.decode_batch([[i] for i in range(shape.vocab)])
    empty = {i for i, t in enumerate(texts) if not t}
    assert empty == {tok.token_to_id(t) for t in SPECIAL}
    assert texts[shape.vocab - len(SPECIAL) - 100] != ""
    ids = tok.encode("The capital of France is Paris.").ids
    assert tok.decode(ids) == "The capital of France is Paris."
    assert not [i for i in ids if tok.id_to_token(i) == FILLER.format(i)]


def test_a_vocabulary_smaller_than_the_tokenizers_is_refused():
    with pytest.raises(ValueError, match="vocab_size 100 is smaller"):
        build_tokenizer(100)


def test_the_written_tokenizer_has_the_configs_vocab_size(tiny_int4):
    config = json.loads((tiny_int4 / "config.json").read_text())
    tok = Tokenizer.from_file(str(tiny_int4 / "tokenizer.json"))
    assert tok.get_vocab_size() == config["text_config"]["vocab_size"] == TINY.vocab


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>"
)


def scripted_answer(thinking: bool, tools: list | None) -> str:
    """What the scripted model writes after the prompt the checkpoint's own chat template renders
    (jinja2, as transformers renders it for vLLM): the bigram chain the weights encode
    (lab.tiny.tokenizer.script_chain) followed from the prompt's last token to <|im_end|>."""
    import jinja2

    from lab.tiny.tokenizer import CHAT_TEMPLATE, script_chain

    tok = build_tokenizer(TINY.vocab)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = json.dumps
    prompt = env.from_string(CHAT_TEMPLATE).render(
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=tools,
        add_generation_prompt=True,
        enable_thinking=thinking,
    )
    chain, end = script_chain(tok), tok.token_to_id("<|im_end|>")
    out = [tok.encode(prompt).ids[-1]]
    while out[-1] != end and len(out) < 64:
        out.append(chain[out[-1]])
    return tok.decode(out[1:], skip_special_tokens=False)


@pytest.mark.parametrize("tools", [[WEATHER], None], ids=["tools", "no tools"])
def test_the_weather_call_comes_with_thinking_on_and_off(tools):
    """Many clients leave thinking on (the template's default): the call follows the reasoning
    and the greeting there, as the content qwen3_coder's parser leaves beside the call; with
    thinking off it is the whole answer."""
    on = scripted_answer(True, tools)
    assert on == (
        "The user says hello; a short greeting is enough.\n</think>\n\nHello! I am a tiny "
        f"random-weight Qwen3.6-shaped test model.{CALL}<|im_end|>"
    )
    assert scripted_answer(False, tools) == f"{CALL}<|im_end|>"
