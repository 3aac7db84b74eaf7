#!/usr/bin/env python3
"""make_fp8_checkpoint.py: a tiny FP8 checkpoint as llm-compressor publishes them, and
transformers' logits for its weights, so the engine's FP8 loader can be checked against an
outside view (tests/test_fp8_checkpoint.cpp and tests/test_fp8_checkpoint_gpu.cu read it; they
skip while it is absent).

    python3 tests/make_fp8_checkpoint.py [--out tests/fixtures/olmo2_fp8] [--scale-dtype bfloat16]

Needs torch (with float8_e4m3fn), transformers and safetensors; runs on the CPU in seconds.

What it writes into --out:
  config.json          a seeded tiny OLMo-2 (head size 64, so the GPU runs it; widths that need
                       the engine's FP8 padding: intermediate 200, vocabulary 1007), with a
                       compressed-tensors quantization_config (FP8-Dynamic: 8-bit float weights
                       per channel, dynamic per-token activations)
  model.safetensors    the embedding and the norms in bf16; every linear weight, lm_head
                       included, as float8_e4m3fn codes (F8_E4M3) with weight_scale [N, 1] in
                       --scale-dtype, quantized as llm-compressor does:
                           scale = amax(|W[n, :]|) / 448,  q = clamp(W / scale, -448, 448) in E4M3
  fp8_ref.safetensors  the reference, in the golden files' format (tests/golden.h):
                       prompt_ids [T] int32, logits [T, V] (every position), decode_ids [8]
                       int32, decode_logits [8, V] (8 greedy steps through the KV cache), all
                       from transformers' Olmo2ForCausalLM in float32 on the same weights
                       dequantized as the engine does it: q.float() * scale.float() (one fp32
                       rounding), bf16 tensors widened.

With the compressed-tensors package installed, transformers can load the folder itself; the
script then also prints how far transformers' own decompression lands from that reference.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import Olmo2Config, Olmo2ForCausalLM

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def tiny_model(seed):
    torch.manual_seed(seed)
    cfg = Olmo2Config(hidden_size=128, intermediate_size=200, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=1007, max_position_embeddings=128, rms_norm_eps=1e-6,
                      rope_theta=10000.0, tie_word_embeddings=False, eos_token_id=1000, pad_token_id=1001,
                      bos_token_id=None)
    model = Olmo2ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():   # bf16 values, as a published model's weights are
            p.copy_((torch.randn_like(p) * 0.1 if p.dim() == 2 else 1 + torch.randn_like(p) * 0.1)
                    .to(torch.bfloat16).float())
    return model


def is_linear(name):
    return name == "lm_head.weight" or any(f".{n}.weight" in name for n in LINEAR)


def quantize(w, scale_dtype):
    """Per output channel, as llm-compressor's FP8 schemes: codes and the scale as stored."""
    amax = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
    scale = (amax / 448.0).to(scale_dtype)
    q = (w / scale.float()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, scale


def quantization_config():
    scheme = {"num_bits": 8, "type": "float", "symmetric": True}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "ignore": [], "kv_cache_scheme": None,
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": dict(scheme, strategy="channel", dynamic=False),
                "input_activations": dict(scheme, strategy="token", dynamic=True)}}}


def write_checkpoint(model, out, scale_dtype):
    """model.safetensors + config.json; returns the dequantized state dict (float32)."""
    stored, dequantized = {}, {}
    for name, p in model.state_dict().items():
        if is_linear(name):
            q, scale = quantize(p, scale_dtype)
            stored[name], stored[name + "_scale"] = q.contiguous(), scale.contiguous()
            dequantized[name] = q.float() * scale.float()
        else:
            stored[name] = p.to(torch.bfloat16).contiguous()
            dequantized[name] = p
    os.makedirs(out, exist_ok=True)
    save_file(stored, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg["quantization_config"] = quantization_config()
    cfg["torch_dtype"] = "bfloat16"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return dequantized


@torch.no_grad()
def reference(model, prompt, steps=8):
    """Logits of every prompt position, then `steps` greedy steps through the KV cache."""
    out = model(torch.tensor([prompt]), use_cache=True)
    logits, past = out.logits[0], out.past_key_values
    ids, step_logits = [], []
    nxt = int(logits[-1].argmax())
    for _ in range(steps):
        ids.append(nxt)
        o = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = o.past_key_values
        step_logits.append(o.logits[0, -1])
        nxt = int(o.logits[0, -1].argmax())
    return logits, torch.tensor(ids, dtype=torch.int32), torch.stack(step_logits)


def rel_l2(a, b):
    return float((a - b).norm() / b.norm())


def check_transformers_view(out, prompt, want):
    """transformers' own loading of the folder (needs the compressed-tensors package)."""
    try:
        import compressed_tensors  # noqa: F401
        from transformers import AutoModelForCausalLM
    except ImportError:
        print("compressed-tensors is not installed: transformers' own view of the checkpoint not checked")
        return
    try:
        m = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            got = m(torch.tensor([prompt])).logits[0].float()
    except Exception as e:  # the files are written; this check is only informative
        print(f"transformers could not load the folder itself: {type(e).__name__}: {e}")
        return
    print(f"transformers' own loading (compressed-tensors): logits rel-L2 {rel_l2(got, want):.3e} "
          "against the reference (its decompression may compute in bf16)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/olmo2_fp8")
    ap.add_argument("--scale-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    model = tiny_model(a.seed)
    dequantized = write_checkpoint(model, a.out, getattr(torch, a.scale_dtype))
    model.load_state_dict(dequantized)
    g = torch.Generator().manual_seed(a.seed)
    prompt = torch.randint(0, 1000, (12,), generator=g).tolist()   # 12 tokens: the GPU's small-batch FP8 path
    logits, decode_ids, decode_logits = reference(model, prompt)
    save_file({"prompt_ids": torch.tensor(prompt, dtype=torch.int32), "logits": logits.float().contiguous(),
               "decode_ids": decode_ids, "decode_logits": decode_logits.float().contiguous()},
              os.path.join(a.out, "fp8_ref.safetensors"),
              metadata={"torch": torch.__version__, "transformers": __import__("transformers").__version__})
    print(f"wrote {a.out}: {sum(1 for n in dequantized if is_linear(n))} FP8 weights, prompt of {len(prompt)} tokens")
    check_transformers_view(a.out, prompt, logits)


if __name__ == "__main__":
    main()
