#!/usr/bin/env python3
"""Writes the reference encodings that tests/test_tokenizer_bpe.cpp checks the BPE tokenizer against.

For each tokenizer.json in tests/tokenizers/ it encodes the same list of strings (>= 300, listed
below by kind) with Hugging Face `tokenizers` and decodes the ids back with and without special
tokens. It also writes decode-only cases: the ids of three short strings joined, with added-token
ids and one id past the vocabulary put in between. Output: tests/tokenizer_refs/<tokenizer name>.json:
  {"tokenizer": path, "tokenizers_version": v,
   "cases":  [{"kind", "text", "ids", "decode", "decode_skip"}],
   "decode_cases": [{"ids", "decode", "decode_skip"}]}

Usage (needs `pip install tokenizers`; run from the repository root):
  python3 tests/make_tokenizer_refs.py [--corpus corpus.txt.xz]   # adds 20 corpus paragraphs
"""
import argparse
import glob
import json
import lzma
import os
import random

from tokenizers import Tokenizer, __version__ as tokenizers_version


def english():
    return [
        "Hello world",
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        "Once upon a time, there was a little girl named Lily.",
        "She said, \"I don't know what you're talking about.\"",
        "It was the best of times, it was the worst of times...",
        "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal.",
        "e.g. i.e. etc. U.S.A. Ph.D.",
        "ALL CAPS SENTENCE WITH SHOUTING!!!",
        "mIxEd CaSe WoRdS",
        "hyphen-ated words and em--dashes and en - dashes",
        "email me at someone@example.com or visit https://example.com/path?q=1&r=2#frag",
        "a",
        " a",
        "a ",
        " ",
        "?",
        "Question? Answer! Statement. Ellipsis... Interrobang?!",
        "(parenthesis) [brackets] {braces} <angles>",
        "100% of $5 is $5; 50% is $2.50 & so on.",
        "The year 1999 and the year 2024 and the number 3.14159.",
        "Café résumé naïve façade coöperate",
        "I think, therefore I am.\nAnother line.\n\nA paragraph.",
        "Tabs\tbetween\twords",
        "trailing newline\n",
        "\nleading newline",
        "Semi;colon:colon,comma.period",
        "quotes 'single' \"double\" `back`",
        "#hashtag @mention $dollar ^caret *star ~tilde |pipe \\backslash /slash",
        "Unicode quotes \u201csmart\u201d \u2018single\u2019 and apostrophe\u2019s",
    ]


def code():
    return [
        "def f(x):\n    return x * 2\n",
        "int main(int argc, char** argv) {\n\treturn 0;\n}\n",
        "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
        "x = [1, 2, 3]\ny = {'a': 1, \"b\": [2.5e-3, -7]}\nprint(x, y)",
        "if __name__ == \"__main__\":\n    main()\n",
        "<html>\n  <body class=\"main\">\n    <p>Hi &amp; bye</p>\n  </body>\n</html>",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
        "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))",
        "const f = async (x) => { await g(x); return x ?? null; };",
        "    indented four\n        indented eight\n\t\ttabbed twice",
        "$ ls -la | grep '\\.txt$' > out.log 2>&1 && echo done",
        "{\"key\": \"value\", \"list\": [true, false, null], \"n\": 123456789}",
        "a_b_c = snake_case; camelCaseName; PascalCase; SCREAMING_SNAKE",
        "x+=1;y-=2;z*=3;w/=4;v%=5;u**=6;t//=7",
        "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-old\n+new",
        "   \n   \n",
        "// comment\n/* block\n   comment */\n# python comment",
        "matrix = [[0]*10 for _ in range(10)]",
        "regex = r'^(?:[a-z0-9!#$%&*+/=?^_`{|}~-]+)@example\\.com$'",
    ]


def numbers(rng):
    out = [str(10**k) for k in range(0, 25, 3)]
    out += ["".join(rng.choice("0123456789") for _ in range(n)) for n in range(1, 41)]
    out += ["1,234,567.89", "-42", "+3.0e-10", "0x1F2E3D", "0b101010", "1/2 + 3/4 = 5/4",
            "v1.2.3-rc4", "192.168.0.1", "2024-06-07T12:34:56Z", "12:30pm", "$1,000,000",
            "3.14159265358979323846264338327950288", "1st 2nd 3rd 4th 21st 100th",
            "\u0663\u0664\u0665 Arabic-Indic", "\uff11\uff12\uff13 fullwidth", "x\u00b2 + y\u00b3 = z\u00b2",
            "\u2167 \u216b roman", "\u00bd \u00bc fractions", "\u0967\u0968\u0969 Devanagari digits",
            "123abc456def", "abc123", "a1b2c3", "99 bottles", "007", "0000000000"]
    return out


def whitespace():
    out = []
    for k in list(range(1, 31)) + [40, 50, 64, 100]:
        out.append("a" + " " * k + "b")
    out += [" " * k for k in (1, 2, 3, 5, 24, 25, 26, 48, 49)]
    out += ["  leading two", "trailing two  ", "   ", "\t", "\t\t\t", "a\tb", "a \t b", "\t a", "a\t\t b",
            "\n", "\n\n", "\n\n\n\n", "\r\n", "\r\n\r\n", "\r", "\r\r\n", "\n\r", "a\r\nb\r\nc",
            "line1\nline2\r\nline3\rline4", " \n ", "  \n  ", "\t\n\t", " \r\n ", "a \n b", "a  \n  b",
            "a\n\n\nb", "a\n \n b", "x \t\n y", "end with spaces   ", "end with newline \n",
            "\x0b\x0c vertical tab and form feed", "\x1c\x1d\x1e\x1f info separators",
            "nbsp\u00a0here", "ideographic\u3000space", "line\u2028separator", "para\u2029separator",
            "next\x85line", "zero\u200bwidth", "bom\ufeffhere", "mongolian\u180evowel", "thin\u2009space",
            "em\u2003space", "ogham\u1680space", "narrow\u202fnbsp", "math\u205fspace",
            "\u00a0\u00a0 mixed \u3000 \t\n spaces", "   \t\t   ", " .", "  .", "   ...",
            " 1", "  1", "   12345", " \u4e2d", "  \u4e2d\u6587"]
    return out


def contractions():
    return ["I'm", "you're", "he'll", "she'd", "they've", "it's", "don't", "won't", "can't",
            "I'M", "YOU'RE", "HE'LL", "SHE'D", "THEY'VE", "IT'S", "DON'T", "It'S", "We'Re", "You'Ll",
            "'s", "'S", "'t", "'re", "'RE", "'ll", "'LL", "'Ll", "'d", "'D", "'m", "'M", "'ve", "'VE",
            "it'\u017f", "'\u017ft", "o'clock", "rock'n'roll", "''", "'''s", "'", "x'", "' s",
            "the dog's bone", "the dogs' bones", "l'homme d'affaires", "'sup", "'twas", "'lll", "'ree"]


def scripts():
    return [
        "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5\uff0c\u8fd9\u662f\u4e00\u4e2a\u53e5\u5b50\u3002",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3082\u3002",
        "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4.",
        "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0644\u063a\u0629 \u062c\u0645\u064a\u0644\u0629",
        "\u05e2\u05d1\u05e8\u05d9\u05ea \u05d6\u05d5 \u05e9\u05e4\u05d4",
        "\u0939\u093f\u0928\u094d\u0926\u0940 \u090f\u0915 \u092d\u093e\u0937\u093e \u0939\u0948\u0964",
        "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
        "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u044f\u0437\u044b\u043a, \u0401\u0436.",
        "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03b3\u03c1\u03ac\u03bc\u03bc\u03b1\u03c4\u03b1",
        "Mixed \u4e2d\u6587 and English and \u0627\u0644\u0639\u0631\u0628\u064a\u0629 123",
        "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 Georgian",
        "\u1200\u1208\u1218 Ethiopic",
        "\U00020000\U0002a6d6 rare CJK ext B",
        "\u0f56\u0f7c\u0f51\u0f0b\u0f61\u0f72\u0f42 Tibetan",
    ]


def emoji():
    return [
        "\U0001F600 smile", "I \u2764\ufe0f NY", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family",
        "\U0001F1FA\U0001F1F8\U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5 flags", "\U0001F44D\U0001F3FD thumbs",
        "1\ufe0f\u20e3 keycap", "\U0001F3F3\ufe0f\u200d\U0001F308 rainbow flag",
        "\U0001F9D1\u200d\U0001F4BB coder", "emoji\U0001F389in\U0001F38Ewords", "\U0001F600\U0001F600\U0001F600",
        "\u2615 \u26a1 \u2b50", "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F england",
    ]


def combining():
    return [
        "cafe\u0301", "e\u0301", "\u0301", "a\u0301\u0302\u0303", "A\u030a", "\u212b", "\u2126 ohm",
        "n\u0303o", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "\u0041\u0308\u0304",
        "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dalgo",
        "o\u0308 vs \u00f6", "\u0065\u0301\u0065\u0301\u0065\u0301", "\u00e9\u0301", "s\u0323\u0307",
        "\u0958 decomposition-excluded", "\u0915\u093c", "\ufb01 ligature", "\u1e9b\u0323",
    ]


def specials():
    return [
        "<|endoftext|>", "<|endoftext|><|endoftext|>", "Hello<|endoftext|>World", " <|endoftext|> ",
        "a  <|endoftext|>  b", "<|endoftext", "<|endoftext|", "endoftext|>", "<<|endoftext|>>",
        "<|padding|>", "x<|padding|>y", "<|pad|>", "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
        "<|fim_prefix|>def f(<|fim_suffix|>)<|fim_middle|>", "<|extra_id_0|><|extra_id_1|><|extra_id_10|>",
        "<|extra_id_1|>0", "<|endofprompt|>", "|||EMAIL_ADDRESS|||", "|||PHONE_NUMBER|||", "|||IP_ADDRESS|||",
        "contact |||EMAIL_ADDRESS||| or |||PHONE_NUMBER|||.", "||||IP_ADDRESS||||", "ip:|||IP_ADDRESS|||x",
        "e<|endoftext|>\u0301", "\u0301<|endoftext|>", "<|endoftext|>  \n  <|endoftext|>",
        "text<|endoftext|>" + " " * 30 + "more", "<|ENDOFTEXT|>", "<| endoftext |>",
    ]


def long_words(rng):
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["a" * 1000, "ab" * 500, "".join(rng.choice(letters) for _ in range(2000)),
            "supercalifragilisticexpialidocious" * 30, "9" * 1000, "!" * 500, "=-" * 300, "_" * 257,
            " " * 300, "\n" * 200, "\u4e2d" * 300, "\U0001F600" * 100,
            "".join(rng.choice(letters + letters.upper() + "0123456789+/") for _ in range(1500)) + "==",
            "https://example.com/" + "/".join("seg%d" % i for i in range(150)),
            "Pneumonoultramicroscopicsilicovolcanoconiosis", "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch"]


def ascii_chars():
    return [chr(c) for c in range(128)] + ["".join(chr(c) for c in range(32, 127)), "".join(chr(c) for c in range(128))]


def fuzz(rng, n):
    pool = (list("aAzZsStTrReEvVmMlLdD0123456789") + [" "] * 8 +
            ["\t", "\n", "\r", "\r\n", "'", "'", "'s", "'S", "'ll", "'RE", "!", ".", ",", "-", "_", "(", ")",
             "\"", "\u017f", "\u00e9", "e\u0301", "\u0301", "\u4e2d", "\u3042", "\uac00", "\u0627", "\u0928\u093f",
             "\U0001F468\u200d\U0001F469", "\U0001F1FA\U0001F1F8", "\u00a0", "\u3000", "\u2028", "\x85", "\x0b",
             "\x1c", "\u200b", "\ufeff", "\u2009", "<|endoftext|>", "<|padding|>", "|||IP_ADDRESS|||",
             "<|im_start|>", "  ", "    ", "\u00b2", "\u2167", "\u0663", "\uff11", "\u212b", "A\u030a", "x" * 30, "9" * 7])
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def corpus_paragraphs(path, rng, n):
    lines = [l for l in lzma.open(path, "rt", encoding="utf-8").read().split("\n") if len(l) > 40]
    return [l[:2000] for l in rng.sample(lines, n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="corpus.txt.xz to take 20 paragraphs from")
    ap.add_argument("--out", default="tests/tokenizer_refs")
    args = ap.parse_args()
    rng = random.Random(20240607)
    kinds = {"english": english(), "code": code(), "numbers": numbers(rng), "whitespace": whitespace(),
             "contractions": contractions(), "scripts": scripts(), "emoji": emoji(), "combining": combining(),
             "specials": specials(), "long": long_words(rng), "ascii": ascii_chars(), "fuzz": fuzz(rng, 150),
             "empty": [""]}
    if args.corpus:
        kinds["corpus"] = corpus_paragraphs(args.corpus, rng, 20)
    texts = [(k, t) for k, ts in kinds.items() for t in ts]
    os.makedirs(args.out, exist_ok=True)
    for path in sorted(glob.glob("tests/tokenizers/*.json")):
        tok = Tokenizer.from_file(path)
        cases = []
        for kind, text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append({"kind": kind, "text": text, "ids": ids,
                          "decode": tok.decode(ids, skip_special_tokens=False),
                          "decode_skip": tok.decode(ids, skip_special_tokens=True)})
        added = [t["id"] for t in json.load(open(path))["added_tokens"]]
        vocab = tok.get_vocab_size(with_added_tokens=True)
        decode_cases = []
        short = [c for c in cases if 0 < len(c["ids"]) <= 40]  # whole encodings: valid UTF-8 when joined
        for _ in range(40):
            ids = []
            for c in rng.sample(short, 3):
                ids += c["ids"] + [rng.choice(added)]
            ids.insert(rng.randrange(len(ids) + 1), rng.choice([vocab, vocab + 7, 10**6]))  # an unknown id
            try:
                decode_cases.append({"ids": ids, "decode": tok.decode(ids, skip_special_tokens=False),
                                     "decode_skip": tok.decode(ids, skip_special_tokens=True)})
            except Exception as e:  # record it: the test then expects unknown ids to be an error
                decode_cases.append({"ids": ids, "error": str(e)})
        out = os.path.join(args.out, os.path.basename(path))
        with open(out, "w", encoding="utf-8") as f:  # one case per line
            head = json.dumps({"tokenizer": path, "tokenizers_version": tokenizers_version})
            f.write(head[:-1] + ',\n"cases": [\n')
            f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
            f.write('],\n"decode_cases": [\n')
            f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in decode_cases))
            f.write("]}\n")
        print(f"{out}: {len(cases)} cases, {len(decode_cases)} decode cases (tokenizers {tokenizers_version})")


if __name__ == "__main__":
    main()
