"""A byte-level BPE tokenizer trained offline on a small corpus, padded with filler tokens to the
model's whole vocabulary, with Qwen's special tokens, the reasoning/tool tags and the scripted
answers' pieces as added tokens, and a Qwen3.5-style chat template (tools, qwen3_coder XML tool
calls, <think>)."""

from __future__ import annotations

import json

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from lab.tiny.shape import TINY

# Qwen special tokens (same strings as the real tokenizer; ids are small here).
SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]  # fmt: skip
# Plain-text tags (special=false in Qwen tokenizers: they survive skip_special_tokens).
TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
# The scripted answers (each piece one added token, distinct, so a bigram chain can spell them).
# The model sees only its last token, so it cannot tell a request with tools from one without:
# both answers end in the tool call. A client parses it into tool_calls when it sent tools
# (thinking on: the greeting is the content beside the call); without tools it is plain text.
SCRIPT_TOOL = [
    "<tool_call>",
    "\n<function=get_weather>",
    "\n<parameter=city>",
    "\nParis",
    "\n</parameter>",
    "\n</function>\n",
    "</tool_call>",
    "<|im_end|>",
]
SCRIPT_THINK = [
    "The user says hello; a short greeting is enough.\n",
    "</think>",
    "\n\nHello! I am a tiny random-weight Qwen3.6-shaped test model.",
    *SCRIPT_TOOL,
]
SCRIPT_PIECES = list(
    dict.fromkeys(p for p in SCRIPT_THINK + SCRIPT_TOOL if p not in SPECIAL and p not in TAGS)
)

# Chat template: Qwen3.5-style (tools in the system turn, qwen3_coder XML tool calls, <think>
# placed in the generation prompt, enable_thinking=false closes it at once).
CHAT_TEMPLATE = r"""{%- set ns = namespace(last_query=messages|length - 1) %}
{%- for message in messages[::-1] %}
{%- set index = (messages|length - 1) - loop.index0 %}
{%- if message.role == "user" and message.content is string and not message.content.startswith("<tool_response>") and ns.last_query == messages|length - 1 %}
{%- set ns.last_query = index %}
{%- endif %}
{%- endfor %}
{%- if tools and tools is iterable and tools is not mapping %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou have access to the following functions:\n\n<tools>" }}
{%- for tool in tools %}
{{- "\n" }}{{- (tool.function if tool.function is defined else tool) | tojson }}
{%- endfor %}
{{- "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == "system" %}
{%- if not loop.first %}{{- raise_exception('System message must be at the beginning.') }}{%- endif %}
{%- elif message.role == "user" %}
{{- '<|im_start|>user\n' + (message.content if message.content is string else '') + '<|im_end|>\n' }}
{%- elif message.role == "assistant" %}
{%- set content = message.content if message.content is string else '' %}
{%- set reasoning = message.reasoning_content if message.reasoning_content is string else (message.reasoning if message.reasoning is string else '') %}
{%- if '</think>' in content %}
{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\n') %}
{%- set content = content.split('</think>')[-1].lstrip('\n') %}
{%- endif %}
{{- '<|im_start|>assistant\n' }}
{%- if loop.index0 > ns.last_query %}
{{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' }}
{%- endif %}
{{- content }}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- set tc = tool_call.function if tool_call.function is defined else tool_call %}
{%- if loop.first and content %}{{- '\n\n' }}{%- elif not loop.first %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n<function=' + tc.name + '>\n' }}
{%- if tc.arguments is mapping %}
{%- for k, v in tc.arguments.items() %}
{{- '<parameter=' + k + '>\n' }}{{- v if v is string else v | tojson }}{{- '\n</parameter>\n' }}
{%- endfor %}
{%- endif %}
{{- '</function>\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == "tool" %}
{%- if loop.first or messages[loop.index0 - 1].role != "tool" %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + (message.content if message.content is string else message.content | tojson) + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != "tool" %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}
{{- '<think>\n\n</think>\n\n' }}
{%- else %}
{{- '<think>\n' }}
{%- endif %}
{%- endif %}"""

CORPUS = """The quick brown fox jumps over the lazy dog. Hello, world! How are you today?
The weather in Paris is sunny, and the weather in Berlin is cloudy with a chance of rain.
A tiny model is used to test the serving engine: it loads, it answers, it is measured.
Please write a short poem about the sea. Explain what a hybrid attention model is.
User: What is the capital of France? Assistant: The capital of France is Paris.
def main():\n    print("hello world")\n    return 0\n\nif __name__ == "__main__":\n    main()\n
{"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>
# Tools\n\nYou have access to the following functions:\n\n<tools>\n</tools>\n\n
system\nYou are a helpful assistant.\n\nuser\nHi there!\n\nassistant\n\n
0123456789 10 20 30 40 50 60 70 80 90 100 1000 2024 2025 2026 3.14 2.71
"""


#: the text of a filler token (ByteLevel: "Ġ" is the space): " w<id>", plain ASCII, no tag
FILLER = "Ġw{}"


def build_tokenizer(vocab_size: int = TINY.vocab) -> Tokenizer:
    """The checkpoint's tokenizer, covering every id of a model of ``vocab_size`` (the config's
    ``vocab_size``): the trained BPE vocabulary, filler tokens up to ``vocab_size`` minus the
    added tokens (each decodes to " w<id>"; encoding never produces them), then Qwen's special
    tokens, the tags and the script's pieces as the top ids. A model with random weights samples
    any id, and an id its tokenizer lacks decodes to nothing: vLLM then answers ``content``
    None and streams chunks without text (the full-size run on the H200, 2026-12-01). Raises
    ValueError when ``vocab_size`` is smaller than the trained vocabulary and added tokens."""
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=640,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    trained.train_from_iterator([CORPUS] * 20, trainer)
    bpe = json.loads(trained.to_str())["model"]
    vocab: dict[str, int] = bpe["vocab"]
    added = len(SPECIAL) + len(TAGS) + len(SCRIPT_PIECES)
    fillers = vocab_size - added - len(vocab)
    if fillers < 0:
        raise ValueError(
            f"vocab_size {vocab_size} is smaller than the tokenizer's {len(vocab) + added} ids"
        )
    for i in range(len(vocab), len(vocab) + fillers):
        assert FILLER.format(i) not in vocab, FILLER.format(i)
        vocab[FILLER.format(i)] = i
    merges = [tuple(m) for m in bpe["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = trained.pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in SCRIPT_PIECES])
    assert tok.get_vocab_size() == vocab_size, (tok.get_vocab_size(), vocab_size)
    return tok


def script_chain(tok: Tokenizer) -> dict[int, int]:
    """token id -> the id the model must produce next."""
    nl = tok.encode("<|im_start|>assistant\n<think>\n").ids
    off = tok.encode("<|im_start|>assistant\n<think>\n\n</think>\n\n").ids
    assert nl[-1] != off[-1], "thinking on/off prompts must end in different tokens"
    chain: dict[int, int] = {}
    for start, script in ((nl[-1], SCRIPT_THINK), (off[-1], SCRIPT_TOOL)):
        ids = [start] + [tok.token_to_id(p) for p in script]
        assert None not in ids, script
        for a, b in zip(ids, ids[1:], strict=False):
            assert chain.get(a, b) == b, f"token {a} would need two successors"
            chain[a] = b
    return chain


def tokenizer_config(tok: Tokenizer) -> dict:
    added = {
        str(tok.token_to_id(t)): {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": t in SPECIAL,
        }
        for t in SPECIAL + TAGS + SCRIPT_PIECES
    }  # fmt: skip
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 262144,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "split_special_tokens": False,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
