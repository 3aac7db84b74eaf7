#!/usr/bin/env python3
"""make_chat_refs.py: reference renderings of the chat templates in tests/fixtures/chat_templates/.

Renders a set of conversations (with and without a system message, several turns, with and
without the generation prompt, Unicode, empty contents, text that looks like markup) with every
template, and writes tests/fixtures/chat_refs.json; tests/test_chat.cpp checks that src/chat.cpp
renders each one to the same string.

The references are rendered with jinja2 set up exactly as transformers' apply_chat_template sets
it up (transformers/utils/chat_template_utils.py, _compile_jinja_template and
render_jinja_template): an ImmutableSandboxedEnvironment with trim_blocks=True,
lstrip_blocks=True and the loopcontrols extension, its own `tojson` filter (json.dumps,
ensure_ascii=False), `raise_exception` and `strftime_now` globals, rendered with messages=...,
tools=None, documents=None, add_generation_prompt=... and the tokenizer's special tokens
(bos_token, eos_token, unk_token, pad_token) as keyword arguments. transformers also registers an
extension for `{% generation %}` blocks; none of these templates has one (checked below).

    python3 tests/make_chat_refs.py                       # writes tests/fixtures/chat_refs.json
    python3 tests/make_chat_refs.py --check-transformers  # where transformers is installed: its
        # apply_chat_template (a tokenizer built from the real tokenizer.json + each template) must
        # give every committed string; exits 1 on the first difference
"""
import argparse
import json
import os
import sys
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE_DIR = os.path.join(HERE, "fixtures", "chat_templates")
OUT = os.path.join(HERE, "fixtures", "chat_refs.json")
DOLMA2 = os.path.join(HERE, "tokenizers", "allenai_dolma2.json")   # OLMo-2 and OLMo-3's tokenizer.json

# Each template with the special tokens of the tokenizer it ships with (eos differs on purpose
# between the two OLMo-3 entries, so that the renderer is seen to take it from the config).
TEMPLATES = {
    "tulu.jinja": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    "olmo2_instruct.jinja": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    "olmo.jinja": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    "olmo3.1_instruct.jinja": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
}
SPECIAL_DEFAULTS = {"unk_token": "<|endoftext|>", "pad_token": "<|pad|>"}


def m(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    ([m("user", "What is the capital of France?")], True),
    ([m("system", "You are a terse assistant."), m("user", "Hello!")], True),
    ([m("system", "Answer in French."), m("user", "Hi"), m("assistant", "Bonjour !"), m("user", "How are you?")], True),
    ([m("user", "2+2?"), m("assistant", "4"), m("user", "3+3?"), m("assistant", "6")], False),
    ([m("user", "no generation prompt")], False),
    ([m("user", "Grüße, 世界 👩‍💻 — naïve café"), m("assistant", "Привет! ¿Qué tal? 🙂")], True),
    ([m("system", ""), m("user", ""), m("assistant", "")], True),
    ([m("user", "line 1\nline 2\n\n  indented {{ not jinja }} {% raw %} <|user|> <|im_end|>\t")], True),
    ([m("user", "ends with an assistant turn"), m("assistant", "and a generation prompt after it")], True),
    ([m("assistant", "an assistant first"), m("user", "then the user")], True),
    ([m("user", "one"), m("system", "a system message in the middle"), m("user", "two")], True),
]   # (no empty conversation: apply_chat_template indexes conversation[0])


def jinja_environment():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def read_template(name):
    with open(os.path.join(TEMPLATE_DIR, name), encoding="utf-8") as f:
        text = f.read()
    assert "generation %}" not in text, name + ": has a {% generation %} block"
    return text


def make_refs():
    import jinja2

    env = jinja_environment()
    cases = []
    for name, tokens in TEMPLATES.items():
        template = env.from_string(read_template(name))
        special = dict(SPECIAL_DEFAULTS, **tokens)
        for messages, add_gen in CONVERSATIONS:
            text = template.render(messages=messages, tools=None, documents=None, add_generation_prompt=add_gen,
                                   **special)
            cases.append({"template": name, **tokens, "messages": messages, "add_generation_prompt": add_gen,
                          "text": text})
    refs = {"made_with": f"jinja2 {jinja2.__version__}, transformers' apply_chat_template environment "
                         "(tests/make_chat_refs.py)", "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(refs, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}")


def check_transformers():
    import transformers

    # transformers 4.x: PreTrainedTokenizerFast; 5.x keeps that name for its tokenizers backend.
    PreTrainedTokenizerFast = getattr(transformers, "PreTrainedTokenizerFast", None) or transformers.TokenizersBackend

    with open(OUT, encoding="utf-8") as f:
        refs = json.load(f)
    tokenizers = {}
    for case in refs["cases"]:
        name = case["template"]
        if name not in tokenizers:
            tok = PreTrainedTokenizerFast(tokenizer_file=DOLMA2, **dict(SPECIAL_DEFAULTS, **TEMPLATES[name]))
            tok.chat_template = read_template(name)
            tokenizers[name] = tok
        got = tokenizers[name].apply_chat_template(case["messages"], tokenize=False,
                                                   add_generation_prompt=case["add_generation_prompt"])
        if got != case["text"]:
            print(f"DIFFERENT: {name}, {case['messages']}, add_generation_prompt={case['add_generation_prompt']}\n"
                  f"  transformers: {got!r}\n  committed:    {case['text']!r}")
            sys.exit(1)
    print(f"transformers {transformers.__version__}: all {len(refs['cases'])} renderings equal the committed ones")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-transformers", action="store_true",
                    help="compare transformers' apply_chat_template with the committed references")
    args = ap.parse_args()
    check_transformers() if args.check_transformers else make_refs()
