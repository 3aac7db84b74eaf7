#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/NAME/), a few KB each, from the
repository's own files: a tiny OLMo-2 checkpoint (F32, and BF16 after an odd-length header,
single and through an index), configs of each family, a tokenizer.json cut down from dolma2's,
texts, and a sentencepiece model cut down from tokenizer/tokenizer.model.
Run from the repository root: python3 tests/fuzz/make_seeds.py"""
import json, os, random, struct

ROOT = "tests/fuzz"
CFG = {"model_type": "olmo2", "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
       "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16, "max_position_embeddings": 64,
       "tie_word_embeddings": True}   # the config fuzz_safetensors.cpp loads with


def put(target, name, data):
    os.makedirs(f"{ROOT}/{target}", exist_ok=True)
    with open(f"{ROOT}/{target}/{name}", "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, odd_header):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if (len(h) % 2 == 1) != odd_header:
        h += b" "
    return struct.pack("<Q", len(h)) + h + data


def tiny_checkpoint(dtype, odd_header):
    H, I, Q, KV, V = 8, 8, 8, 4, 16
    shapes = {"model.embed_tokens.weight": [V, H]}
    for n, s in [("self_attn.q_proj", [Q, H]), ("self_attn.k_proj", [KV, H]), ("self_attn.v_proj", [KV, H]),
                 ("self_attn.o_proj", [H, Q]), ("self_attn.q_norm", [Q]), ("self_attn.k_norm", [KV]),
                 ("post_attention_layernorm", [H]), ("post_feedforward_layernorm", [H]),
                 ("mlp.gate_proj", [I, H]), ("mlp.up_proj", [I, H]), ("mlp.down_proj", [H, I])]:
        shapes[f"model.layers.0.{n}.weight"] = s
    shapes["model.norm.weight"] = [H]
    rng = random.Random(1)
    tensors = {}
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        vals = [1.0 if len(shape) == 1 else rng.gauss(0, 0.3) for _ in range(n)]
        raw = struct.pack(f"<{n}f", *vals)
        if dtype == "BF16":
            raw = b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))
        tensors[name] = (dtype, shape, raw)
    return safetensors(tensors, odd_header)


def checkpoints():
    put("safetensors", "f32", b"\x00" + tiny_checkpoint("F32", False))
    put("safetensors", "bf16_odd_header", b"\x00" + tiny_checkpoint("BF16", True))
    shard = tiny_checkpoint("BF16", False)
    names = list(json.loads(shard[8:8 + struct.unpack("<Q", shard[:8])[0]]).keys())
    index = json.dumps({"metadata": {}, "weight_map": {n: "shard.safetensors" for n in names}}).encode()
    put("safetensors", "index", b"\x01" + index + b"\x00" + shard)
    ints = safetensors({"ids": ("I64", [3], struct.pack("<3q", 1, -2, 3)), "n": ("I32", [2], struct.pack("<2i", 4, 5))}, True)
    put("safetensors", "ints", b"\x00" + ints)


def configs():
    put("config", "olmo2", json.dumps(CFG))
    olmo1 = dict(CFG, model_type="olmo", clip_qkv=8.0, rope_theta=10000.0, eos_token_id=[1, 2])
    put("config", "olmo1", json.dumps(olmo1))
    with open("tests/fixtures/olmo3_swa_yarn/config.json") as f:
        put("config", "olmo3_yarn", f.read())
    v4 = dict(CFG, model_type="olmo3", sliding_window=4, rope_theta=500000.0,
              rope_scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32,
                            "beta_fast": 32.0, "beta_slow": 1.0}, num_hidden_layers=4)
    put("config", "olmo3_v4", json.dumps(v4))


def tokenizer_json():
    with open("tests/tokenizers/allenai_dolma2.json") as f:
        full = json.load(f)
    vocab = {t: i for t, i in full["model"]["vocab"].items() if i < 256}
    merges = []
    for m in full["model"]["merges"]:
        left, right = m.split(" ") if isinstance(m, str) else m
        if left in vocab and right in vocab and left + right in full["model"]["vocab"]:
            vocab[left + right] = full["model"]["vocab"][left + right]
            merges.append(m)
        if len(merges) == 40:
            break
    small = dict(full, added_tokens=full["added_tokens"][:3])
    small["model"] = dict(full["model"], vocab=vocab, merges=merges)
    put("tokenizer_json", "dolma2_small", json.dumps(small, ensure_ascii=False))
    gpt2 = dict(small, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
                normalizer={"type": "NFC"})
    gpt2["model"] = dict(small["model"], merges=[m.split(" ") if isinstance(m, str) else m for m in merges])
    put("tokenizer_json", "gpt2_nfc_pairs", json.dumps(gpt2, ensure_ascii=False))


def texts():
    samples = {"ascii": "Hello world, it's 2024!\n", "spaces": "  a  b\t\tc \r\n\n  ",
               "unicode": "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F642 \u0915\u094d\u0937",
               "special": "<|endoftext|>x<|pad|> 123456789 don't I'll"}
    for name, text in samples.items():
        put("bpe_encode", name, text)
        put("sentencepiece", "text_" + name, b"\x00" + text.encode())


def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def read_fields(b):
    """Top-level protobuf fields of b: (number, wire type, raw bytes of the whole field)."""
    i, out = 0, []
    while i < len(b):
        start, key, shift = i, 0, 0
        while True:
            c = b[i]; i += 1; key |= (c & 0x7F) << shift; shift += 7
            if c < 0x80:
                break
        wire = key & 7
        if wire == 0:
            while b[i] & 0x80:
                i += 1
            i += 1
            value = None
        elif wire == 2:
            n, shift = 0, 0
            while True:
                c = b[i]; i += 1; n |= (c & 0x7F) << shift; shift += 7
                if c < 0x80:
                    break
            value = b[i:i + n]; i += n
        elif wire == 5:
            i += 4; value = None
        elif wire == 1:
            i += 8; value = None
        out.append((key >> 3, wire, b[start:i], value))
    return out


def sentencepiece_model(keep=300):
    """tokenizer/tokenizer.model with only its first `keep` pieces (controls, the 256 bytes, the
    first merges) and the trainer's vocab_size set to match."""
    with open("tokenizer/tokenizer.model", "rb") as f:
        fields = read_fields(f.read())
    pieces = [raw for num, _, raw, _ in fields if num == 1][:keep]
    out = b"".join(pieces)
    for num, wire, raw, value in fields:
        if num == 2:   # TrainerSpec: replace vocab_size (field 4)
            spec = b"".join(r if n != 4 else b"\x20" + varint(keep) for n, _, r, _ in read_fields(value))
            out += b"\x12" + varint(len(spec)) + spec
        elif num != 1:
            out += raw
    put("sentencepiece", "model_small", b"\x01" + out)


if __name__ == "__main__":
    checkpoints(); configs(); tokenizer_json(); texts(); sentencepiece_model()
