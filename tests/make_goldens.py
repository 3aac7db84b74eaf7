#!/usr/bin/env python3
"""make_goldens.py: golden activations from Hugging Face `transformers`, the reference the
engine is tested against.

Mode 1 (`python3 tests/make_goldens.py [--out-dir tests/fixtures] [--only NAME]...`, needs
torch and transformers; CPU only): builds six tiny seeded OLMo models (or the --only ones),
saves each with `save_pretrained` into tests/fixtures/<name>/ (config.json,
generation_config.json, safetensors weights), loads it back from disk in float32 and dumps
golden.safetensors beside it:

    olmo1_clip_tied      OLMo-1, clip_qkv clipping a good share of q/k/v, tied lm_head
    olmo2_mha            OLMo-2, nKV == nH, head_dim 128, weights saved in fp16
    olmo2_gqa            OLMo-2, nH 8, nKV 2, saved in >= 2 shards with an index
    olmo3_swa_yarn       OLMo-3, layers sliding/sliding/sliding/full, window 6, YaRN
    olmo2_headdim_bf16   OLMo-2, head_dim 64 != hidden/heads (16), weights saved in bf16
    olmo2_hd32           OLMo-2, head_dim 32 (nH 4, nKV 2): a head size the GPU attention pads

Mode 2 (--model DIR --sp-model TOK.model --prompt TEXT --out DIR2 [--greedy-prompt TEXT]...):
the same tensors for an existing checkpoint, the prompt tokenized with sentencepiece (no
BOS), plus greedy48_{k} / prompt48_{k} for each --greedy-prompt.

Tensors (float32 unless noted, T = prompt length, batch dimension dropped, row-major):
    prompt_ids [T] int32, embed [T,H]
    layers.{i}.q/.k/.v          [T, n*hd]  after q/k-norm (OLMo-2/3) or clip (OLMo-1), before RoPE
    layers.{i}.q_rope/.k_rope   [T, n*hd]  after RoPE
    layers.{i}.attn [T, nH*hd]  attention output before o_proj;  layers.{i}.o_proj [T,H]
    layers.{i}.resid_attn [T,H] residual after the attention half
    layers.{i}.mlp [T,H]        down_proj output (before OLMo-2/3's post_feedforward_layernorm)
    layers.{i}.out [T,H]        residual after the block
    final_norm [T,H], logits [T,V]
    decode_ids [8] int32, decode_logits [8,V]: step s feeds decode_ids[s] at position T+s
        through the KV cache (decode_ids = greedy_ids[:8])
    greedy_ids [24] int32       generate(do_sample=False, max_new_tokens=24), new tokens only
    beam2_ids, beam4_ids int32  generate(num_beams=N, max_new_tokens=16), best beam, defaults
                                for length_penalty / early_stopping

How they are captured: forward hooks and pre-hooks on the modules (embedding, projections,
o_proj, mlp, layers, final norm), and a wrapper around the modeling module's
apply_rotary_pos_emb for q/k before and after RoPE (and the cos/sin each layer really uses).
If a transformers version stops calling that module-level function, the wrapper sees no call
and q/k after RoPE are computed from the cos/sin the attention module received instead.

Every activation is then re-derived from its inputs with the math of
docs/architecture.md (norms, clip, RoPE, causal/sliding attention, SwiGLU,
residual identities, final norm, lm_head) and the worst error per check is printed; the
8 KV-cache decode steps are compared with one no-cache forward over prompt + decode_ids.

RoPE per layer type in OLMo-3: the script compares the cos/sin each layer hands to
apply_rotary_pos_emb with plain RoPE and with YaRN (architecture doc formulas), prints the
finding and stores it in the golden's metadata ("rope").
What transformers 5.17 does (read in its modeling_olmo3.py, and seen on the fixture run):
Olmo3RotaryEmbedding builds one inv_freq and one attention_scaling PER LAYER TYPE from
config.rope_parameters[layer_type] (5.x writes rope_parameters keyed by "full_attention" /
"sliding_attention"; the legacy rope_scaling goes to "full_attention" only);
Olmo3Model.forward computes cos/sin for each type and gives layer i the pair of
config.layer_types[i]; Olmo3Attention calls the module-level apply_rotary_pos_emb (the
wrapper saw one call per layer). So YaRN (scaled inv_freq, cos/sin times attention_factor)
applies to full-attention layers only, plain RoPE to sliding ones: olmo3_swa_yarn's layers
[sliding, sliding, sliding, full] matched [plain, plain, plain, yarn] within 5e-5.

Reference runs: torch on CPU, float32, eager attention, deterministic algorithms, no TF32.
"""
import argparse
import copy
import inspect
import json
import math
import os
import random
import shutil
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no network

import torch
import torch.nn.functional as F
import safetensors
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, GenerationConfig

PROMPT_LEN = 21          # odd, longer than the sliding window
PROMPT_SEED = 20240521
GREEDY_NEW, BEAM_NEW, DECODE_STEPS = 24, 16, 8
MIN_GAP = 1e-3           # smallest allowed top1 - top2 logit gap over the greedy steps
TOL = 2e-5               # re-derivation checks: max |err| / max(1, max |ref|)
INIT_STD = 0.15          # weights ~ N(0, INIT_STD²); norm weights ~ 1 + 0.2·N(0, 1)

SLIDING, FULL = "sliding_attention", "full_attention"
YARN = dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=256,
            beta_fast=32.0, beta_slow=1.0, attention_factor=1.2)

# Config keys passed to the config class; LATE keys are set after construction (some 5.x
# config classes skip their base __post_init__ when num_key_value_heads is given, and
# head_dim is not a declared Olmo2Config field).
FIXTURES = {
    "olmo1_clip_tied": dict(
        model_type="olmo", seed=100, clip_quantile=0.75,
        config=dict(vocab_size=320, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                    num_attention_heads=2, max_position_embeddings=128, rope_theta=10000.0,
                    tie_word_embeddings=True),
        late=dict(num_key_value_heads=2)),
    "olmo2_mha": dict(
        model_type="olmo2", seed=200, save_dtype=torch.float16,
        config=dict(vocab_size=352, hidden_size=256, intermediate_size=192, num_hidden_layers=3,
                    num_attention_heads=2, max_position_embeddings=128, rope_theta=500000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=False),
        late=dict(num_key_value_heads=2)),
    "olmo2_gqa": dict(
        model_type="olmo2", seed=300, max_shard_size="200KB",
        config=dict(vocab_size=384, hidden_size=128, intermediate_size=160, num_hidden_layers=2,
                    num_attention_heads=8, max_position_embeddings=128, rope_theta=500000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=False),
        late=dict(num_key_value_heads=2, head_dim=64)),
    "olmo3_swa_yarn": dict(
        model_type="olmo3", seed=400,
        config=dict(vocab_size=400, hidden_size=128, intermediate_size=128, num_hidden_layers=4,
                    num_attention_heads=2, max_position_embeddings=1024, rope_theta=500000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, sliding_window=6,
                    layer_types=[SLIDING, SLIDING, SLIDING, FULL], rope_scaling=dict(YARN)),
        late=dict(num_key_value_heads=1)),
    "olmo2_headdim_bf16": dict(
        model_type="olmo2", seed=500, save_dtype=torch.bfloat16,
        config=dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=128, rope_theta=500000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=False),
        late=dict(num_key_value_heads=2, head_dim=64)),
    "olmo2_hd32": dict(
        model_type="olmo2", seed=600,
        config=dict(vocab_size=336, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=128, rope_theta=500000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=False),
        late=dict(num_key_value_heads=2, head_dim=32)),
}


# ----------------------------------------------------------------------------------------
# The architecture doc's math, used to re-derive every captured activation.

def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def olmo1_layer_norm(x):
    return F.layer_norm(x, (x.shape[-1],), eps=1e-5)  # no weight, no bias, eps fixed


def rope_tables(T, hd, theta, yarn=None):
    """cos, sin [T, hd] for positions 0..T-1: plain RoPE, or YaRN when `yarn` is given."""
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    scale = 1.0
    if yarn:
        def d(r):
            return hd * math.log(yarn["original_max_position_embeddings"] / (2 * math.pi * r)) / (2 * math.log(theta))
        low, high = max(math.floor(d(yarn["beta_fast"])), 0), min(math.ceil(d(yarn["beta_slow"])), hd - 1)
        ramp = ((torch.arange(hd // 2, dtype=torch.float32) - low) / max(high - low, 1e-3)).clamp(0, 1)
        inv = inv / yarn["factor"] * ramp + inv * (1 - ramp)
        scale = yarn["attention_factor"]
    angle = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([angle, angle], -1)
    return emb.cos() * scale, emb.sin() * scale


def apply_rope(x, cos, sin, hd):
    """x [T, n*hd], rotate_half layout: element d pairs with d + hd/2."""
    T = x.shape[0]
    x = x.view(T, -1, hd)
    rotated = torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return (x * cos[:, None] + rotated * sin[:, None]).reshape(T, -1)


def attention(q, k, v, nH, nKV, hd, window):
    """Causal softmax(q·kᵀ/√hd)·v; query i sees keys i-window+1..i when window is set."""
    T = q.shape[0]
    q = q.view(T, nH, hd).transpose(0, 1)
    k = k.view(T, nKV, hd).transpose(0, 1).repeat_interleave(nH // nKV, 0)
    v = v.view(T, nKV, hd).transpose(0, 1).repeat_interleave(nH // nKV, 0)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = j <= i
    if window:
        allowed = allowed & (j > i - window)
    p = (q @ k.transpose(1, 2) * hd ** -0.5).masked_fill(~allowed, float("-inf")).softmax(-1)
    return (p @ v).transpose(0, 1).reshape(T, nH * hd)


def swiglu_mlp(x, mlp):
    return (F.silu(x @ mlp.gate_proj.weight.T) * (x @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T


class Checks:
    """Worst error per named check (layer index stripped), printed at the end of a fixture."""

    def __init__(self):
        self.worst, self.failed, self.passed = {}, [], []

    def close(self, name, got, ref, tol=TOL):
        err = ((got - ref).abs().max() / max(1.0, ref.abs().max().item())).item()
        key = name.split(".", 2)[-1] if name.startswith("layers.") else name
        self.worst[key] = max(self.worst.get(key, 0.0), err)
        if not err <= tol:
            self.failed.append(f"{name}: {err:.3g} > {tol:g}")

    def true(self, name, ok, detail=""):
        if ok:
            self.passed.append(name)
        else:
            self.failed.append(f"{name} {detail}")

    def report(self, tag):
        print(f"  [{tag}] worst errors: " + ", ".join(f"{k} {v:.2g}" for k, v in self.worst.items()))
        print(f"  [{tag}] true: " + ", ".join(self.passed))
        for f in self.failed:
            print(f"  [{tag}] CHECK FAILED: {f}")


# ----------------------------------------------------------------------------------------
# Capture: hooks + apply_rotary_pos_emb wrapper around one no-cache forward.

class Recorder:
    """With-block that records the activations of the forward passes run inside it."""

    def __init__(self, model):
        self.model, self.acts, self.layer, self.rope_calls = model, {}, None, 0

    def save(self, name, t):
        self.acts[name] = t[0].detach().float().clone()  # drop the batch dimension

    def __enter__(self):
        m, olmo1 = self.model.model, self.model.config.model_type == "olmo"
        self.handles = []

        def out_hook(module, name):
            self.handles.append(module.register_forward_hook(
                lambda mod, args, out: self.save(name, out[0] if isinstance(out, tuple) else out)))

        def in_hook(module, name, also=None):
            def hook(mod, args, kwargs):
                self.save(name, args[0] if args else kwargs.get("hidden_states", next(iter(kwargs.values()))))
                if also:
                    also(kwargs)
            self.handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

        out_hook(m.embed_tokens, "embed")
        out_hook(m.norm, "final_norm")
        for i, layer in enumerate(m.layers):
            p, a = f"layers.{i}.", layer.self_attn
            in_hook(layer, p + "in")
            out_hook(layer, p + "out")
            in_hook(a, p + "attn_in", also=lambda kw, i=i, p=p: self.enter_attention(i, p, kw))
            for proj in ("q_proj", "k_proj", "v_proj"):
                out_hook(getattr(a, proj), p + proj)
            in_hook(a.o_proj, p + "attn")
            out_hook(a.o_proj, p + "o_proj")
            in_hook(layer.mlp, p + "mlp_in")
            out_hook(layer.mlp, p + "mlp")
            # the residual after attention is the input of OLMo-1's second LayerNorm and of
            # OLMo-2/3's MLP
            in_hook(layer.post_attention_layernorm if olmo1 else layer.mlp, p + "resid_attn")

        self.module = sys.modules[type(m.layers[0].self_attn).__module__]
        self.rope_fn = self.module.apply_rotary_pos_emb
        signature = inspect.signature(self.rope_fn)

        def rope_wrapper(*args, **kwargs):
            q_out, k_out = self.rope_fn(*args, **kwargs)
            q, k, cos, sin = list(signature.bind(*args, **kwargs).arguments.values())[:4]
            p = f"layers.{self.layer}."
            for name, t in (("rq_in", q), ("rk_in", k), ("rq_out", q_out), ("rk_out", k_out),
                            ("rcos", cos), ("rsin", sin)):
                self.save(p + name, t)
            self.rope_calls += 1
            return q_out, k_out

        self.module.apply_rotary_pos_emb = rope_wrapper
        return self

    def enter_attention(self, i, p, kwargs):
        self.layer = i
        cos_sin = kwargs.get("position_embeddings")
        if isinstance(cos_sin, (tuple, list)):
            self.save(p + "cos", cos_sin[0])
            self.save(p + "sin", cos_sin[1])

    def __exit__(self, *exc):
        self.module.apply_rotary_pos_emb = self.rope_fn
        for h in self.handles:
            h.remove()


def heads_to_rows(x):
    """[n, T, hd] (as the attention hands it to RoPE) -> [T, n*hd]."""
    return x.transpose(0, 1).reshape(x.shape[1], -1)


def shape_of(model):
    c = model.config
    nH = c.num_attention_heads
    hd = getattr(c, "head_dim", None) or c.hidden_size // nH
    return nH, c.num_key_value_heads, hd


def window_of(model, i):
    c = model.config
    types = getattr(c, "layer_types", None)
    return c.sliding_window if types and types[i] == SLIDING else None


@torch.no_grad()
def capture(model, ids, checks, rope_spec=None):
    """One no-cache forward over the prompt: the golden activations (name -> tensor), every
    one re-derived from its inputs by `checks`, and the RoPE variant each layer used."""
    c, m = model.config, model.model
    olmo1 = c.model_type == "olmo"
    nH, nKV, hd = shape_of(model)
    T = len(ids)
    with Recorder(model) as rec:
        logits = model(ids[None].long(), use_cache=False).logits[0].float()
    a = rec.acts
    wrapped = rec.rope_calls == len(m.layers)
    if not wrapped:
        print(f"  apply_rotary_pos_emb wrapper called {rec.rope_calls} times for {len(m.layers)} "
              "layers: q/k after RoPE computed from the cos/sin the attention received")
    g = {"embed": a["embed"]}
    checks.close("embed", a["embed"], m.embed_tokens.weight[ids.long()], tol=0)
    rope_found = []
    x = a["embed"]
    for i, layer in enumerate(m.layers):
        p, att = f"layers.{i}.", layer.self_attn
        checks.close(p + "in", a[p + "in"], x, tol=0)
        x_attn = olmo1_layer_norm(x) if olmo1 else x
        checks.close(p + "attn_in", a[p + "attn_in"], x_attn)
        for name in ("q", "k", "v"):
            raw = a[p + name + "_proj"]
            checks.close(p + name + "_proj", raw, x_attn @ getattr(att, name + "_proj").weight.T)
        if olmo1:
            clip = c.clip_qkv
            q, k, v = (a[p + n + "_proj"].clamp(-clip, clip) if clip else a[p + n + "_proj"]
                       for n in ("q", "k", "v"))
        else:
            q = rms_norm(a[p + "q_proj"], att.q_norm.weight, c.rms_norm_eps)
            k = rms_norm(a[p + "k_proj"], att.k_norm.weight, c.rms_norm_eps)
            v = a[p + "v_proj"]
        if wrapped:
            cos, sin = a[p + "rcos"], a[p + "rsin"]
            if p + "cos" in a:
                checks.close(p + "rope_cos_is_attention_input", cos, a[p + "cos"], tol=0)
            checks.close(p + "q", heads_to_rows(a[p + "rq_in"]), q)
            checks.close(p + "k", heads_to_rows(a[p + "rk_in"]), k)
            q, k = heads_to_rows(a[p + "rq_in"]), heads_to_rows(a[p + "rk_in"])
            q_rope, k_rope = heads_to_rows(a[p + "rq_out"]), heads_to_rows(a[p + "rk_out"])
            checks.close(p + "q_rope", q_rope, apply_rope(q, cos, sin, hd))
            checks.close(p + "k_rope", k_rope, apply_rope(k, cos, sin, hd))
        else:
            cos, sin = a[p + "cos"], a[p + "sin"]
            q_rope, k_rope = apply_rope(q, cos, sin, hd), apply_rope(k, cos, sin, hd)
        if rope_spec:
            rope_found.append(rope_variant(cos, sin, T, hd, rope_spec))
        attn = a[p + "attn"]
        checks.close(p + "attn", attn, attention(q_rope, k_rope, v, nH, nKV, hd, window_of(model, i)))
        checks.close(p + "o_proj", a[p + "o_proj"], attn @ att.o_proj.weight.T)
        o = a[p + "o_proj"] if olmo1 else rms_norm(a[p + "o_proj"], layer.post_attention_layernorm.weight, c.rms_norm_eps)
        checks.close(p + "resid_attn", a[p + "resid_attn"], x + o)
        h = a[p + "resid_attn"]
        checks.close(p + "mlp_in", a[p + "mlp_in"], olmo1_layer_norm(h) if olmo1 else h)
        checks.close(p + "mlp", a[p + "mlp"], swiglu_mlp(a[p + "mlp_in"], layer.mlp))
        f = a[p + "mlp"] if olmo1 else rms_norm(a[p + "mlp"], layer.post_feedforward_layernorm.weight, c.rms_norm_eps)
        checks.close(p + "out", a[p + "out"], h + f)
        x = a[p + "out"]
        g.update({p + "q": q, p + "k": k, p + "v": v, p + "q_rope": q_rope, p + "k_rope": k_rope,
                  p + "attn": attn, p + "o_proj": a[p + "o_proj"], p + "resid_attn": h,
                  p + "mlp": a[p + "mlp"], p + "out": x})
    norm = olmo1_layer_norm(x) if olmo1 else rms_norm(x, m.norm.weight, c.rms_norm_eps)
    checks.close("final_norm", a["final_norm"], norm)
    checks.close("logits", logits, a["final_norm"] @ model.lm_head.weight.T)
    g["final_norm"], g["logits"] = a["final_norm"], logits
    return g, rope_found


def rope_variant(cos, sin, T, hd, spec):
    """Which candidate ("plain", "yarn") the cos/sin a layer used match, with the errors."""
    errs = {}
    for name, yarn in (("plain", None), ("yarn", spec.get("yarn"))):
        if name == "yarn" and not yarn:
            continue
        ref_cos, ref_sin = rope_tables(T, hd, spec["theta"], yarn)
        errs[name] = max((cos - ref_cos).abs().max().item(), (sin - ref_sin).abs().max().item())
    best = min(errs, key=errs.get)
    return best if errs[best] < 5e-5 else "neither " + json.dumps(errs)


# ----------------------------------------------------------------------------------------
# Generation, KV-cache decode, and the checks on them.

def generate(model, ids, eos, **kw):
    pad = model.config.pad_token_id
    pad = pad if pad is not None else (eos[0] if isinstance(eos, list) else eos)
    return model.generate(ids[None].long(), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          do_sample=False, eos_token_id=eos, pad_token_id=pad, **kw)


@torch.no_grad()
def generations(model, ids, eos):
    """greedy_ids, beam2_ids, beam4_ids (new tokens only) and the beams' score margins."""
    T = len(ids)
    out = {"greedy_ids": generate(model, ids, eos, max_new_tokens=GREEDY_NEW)[0, T:]}
    margins = {}
    for n in (2, 4):
        r = generate(model, ids, eos, num_beams=n, num_return_sequences=n, max_new_tokens=BEAM_NEW,
                     output_scores=True, return_dict_in_generate=True)
        out[f"beam{n}_ids"] = r.sequences[0, T:]
        if getattr(r, "sequences_scores", None) is not None:
            margins[f"beam{n}"] = (r.sequences_scores[0] - r.sequences_scores[1]).item()
    return {k: v.to(torch.int32) for k, v in out.items()}, margins


@torch.no_grad()
def decode_steps(model, ids, steps, checks):
    """Prefill, then `steps` one-token steps through the KV cache, each feeding the argmax of
    the step before; compared with one no-cache forward over prompt + the fed tokens."""
    out = model(ids[None].long(), use_cache=True)
    past, fed, step_logits = out.past_key_values, [], []
    for _ in range(steps):
        fed.append(int(out.logits[0, -1].argmax()))
        out = model(torch.tensor([[fed[-1]]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        step_logits.append(out.logits[0, -1].float())
    fed, step_logits = torch.tensor(fed, dtype=torch.int32), torch.stack(step_logits)
    full = model(torch.cat([ids, fed])[None].long(), use_cache=False).logits[0].float()
    diff = (step_logits - full[len(ids):]).abs().max().item()
    checks.true("decode_vs_full_forward", diff < 1e-4, f"max |diff| {diff:.3g}")
    return fed, step_logits, diff


@torch.no_grad()
def greedy_gap(model, ids, greedy, checks):
    """Smallest top1 - top2 logit gap over the greedy steps (from one full forward), and
    whether each greedy token is that forward's argmax."""
    full = model(torch.cat([ids, greedy])[None].long(), use_cache=False).logits[0].float()
    steps = full[len(ids) - 1: len(ids) - 1 + len(greedy)]
    top2 = steps.topk(2, dim=-1).values
    checks.true("greedy_is_argmax", torch.equal(steps.argmax(-1).to(torch.int32), greedy))
    return (top2[:, 0] - top2[:, 1]).min().item()


def dump(model, ids, eos, checks, rope_spec=None):
    """Every golden tensor for prompt `ids`, plus a dict of figures for the metadata."""
    g, rope_found = capture(model, ids, checks, rope_spec)
    gen, margins = generations(model, ids, eos)
    fed, step_logits, diff = decode_steps(model, ids, DECODE_STEPS, checks)
    n = min(DECODE_STEPS, len(gen["greedy_ids"]))
    checks.true("decode_ids_are_greedy", torch.equal(fed[:n], gen["greedy_ids"][:n]))
    gap = greedy_gap(model, ids, gen["greedy_ids"], checks)
    g.update(prompt_ids=ids.to(torch.int32), decode_ids=fed, decode_logits=step_logits, **gen)
    info = dict(min_greedy_gap=gap, decode_max_abs_diff=diff, beam_score_margins=margins)
    if rope_found:
        info["rope"] = rope_found
    print(f"  min top1-top2 gap over {len(gen['greedy_ids'])} greedy steps: {gap:.4g}; "
          f"decode vs full forward max |diff|: {diff:.3g}; beam score margins: "
          + ", ".join(f"{k} {v:.4g}" for k, v in margins.items()))
    return g, info


def write_golden(path, g, name, info):
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "fixture": name,
            "notes": json.dumps(info, sort_keys=True)}
    save_file({k: v.contiguous() for k, v in g.items()}, path, metadata=meta)


# ----------------------------------------------------------------------------------------
# Mode 1: the tiny seeded fixtures.

def seeded_prompt():
    rng = random.Random(PROMPT_SEED)
    return torch.tensor([rng.randrange(1, 256) for _ in range(PROMPT_LEN)], dtype=torch.int32)


def build(spec, seed, eos):
    """A random model: weights ~ N(0, INIT_STD²), norm weights ~ 1 + 0.2·N(0,1) (so a kernel
    that ignores a norm weight fails), all from one seeded generator."""
    cls = transformers.AutoConfig.for_model(spec["model_type"]).__class__
    config = cls(**copy.deepcopy(spec["config"]), initializer_range=INIT_STD, eos_token_id=eos, pad_token_id=eos,
                 bos_token_id=None, attention_bias=False)
    for k, v in spec["late"].items():
        setattr(config, k, v)
    model = AutoModelForCausalLM.from_config(config).float().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.2 * noise if p.dim() == 1 else INIT_STD * noise)
        if config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos)
    return model


def calibrate_clip(model, ids, quantile):
    """Sets clip_qkv to the `quantile` of |q|, |k|, |v| over all layers before clipping."""
    with torch.no_grad(), Recorder(model) as rec:
        model(ids[None].long(), use_cache=False)
    raw = torch.cat([t.flatten() for n, t in rec.acts.items() if n.endswith(("q_proj", "k_proj", "v_proj"))])
    model.config.clip_qkv = round(raw.abs().quantile(quantile).item(), 2)


def clip_fraction(model, ids):
    """Share of q/k/v values that clip_qkv really clips, per layer, on the prompt."""
    with torch.no_grad(), Recorder(model) as rec:
        model(ids[None].long(), use_cache=False)
    c = model.config.clip_qkv
    return [round(torch.cat([rec.acts[f"layers.{i}.{n}_proj"].flatten() for n in "qkv"])
                  .abs().gt(c).float().mean().item(), 4) for i in range(len(model.model.layers))]


def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def save_fixture(model, spec, d, ids):
    if spec.get("clip_quantile"):
        calibrate_clip(model, ids, spec["clip_quantile"])
    if spec.get("save_dtype"):
        model = model.to(spec["save_dtype"])
    kw = {"max_shard_size": spec["max_shard_size"]} if spec.get("max_shard_size") else {}
    model.save_pretrained(d, **kw)
    if not os.path.exists(os.path.join(d, "generation_config.json")):
        model.generation_config.save_pretrained(d)


def load(d):
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def check_files(name, spec, d, model, checks):
    """What the fixture's files must show: tied head absent, shards + index, bf16 dtype,
    head_dim and nKV in config.json; and the loaded model's shapes."""
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors") and f != "golden.safetensors")
    headers = {f: st_header(os.path.join(d, f)) for f in files}
    names = {k for h in headers.values() for k in h if k != "__metadata__"}
    dtypes = {v["dtype"] for h in headers.values() for k, v in h.items() if k != "__metadata__"}
    cfg = json.load(open(os.path.join(d, "config.json")))
    tied = spec["config"]["tie_word_embeddings"]
    checks.true("lm_head_in_file", ("lm_head.weight" in names) != tied, f"tied={tied}")
    if tied:
        checks.true("tied_after_load", model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr())
    if spec.get("max_shard_size"):
        checks.true("sharded", len(files) >= 2 and os.path.exists(os.path.join(d, "model.safetensors.index.json")),
                    f"files {files}")
    want = {torch.bfloat16: "BF16", torch.float16: "F16"}.get(spec.get("save_dtype"), "F32")
    checks.true("weight_dtype", dtypes == {want}, f"{dtypes}")
    for k, v in spec["late"].items():
        checks.true(f"config_json_{k}", cfg.get(k) == v, f"{cfg.get(k)} != {v}")
    nH, nKV, hd = shape_of(model)
    att = model.model.layers[0].self_attn
    checks.true("loaded_shapes", att.q_proj.weight.shape[0] == nH * hd and att.k_proj.weight.shape[0] == nKV * hd
                and nH * hd == spec["config"]["num_attention_heads"] * spec["late"].get("head_dim", hd))
    print(f"  files: {files}; weight dtypes {sorted(dtypes)}")
    print(f"  config.json: {json.dumps(cfg, sort_keys=True)}")


def make_fixture(name, spec, out_dir, ids):
    """Seeds from spec["seed"] on until the greedy run has a clear argmax at every step; the
    eos id is one that neither greedy nor beam search produces."""
    d = os.path.join(out_dir, name)
    V = spec["config"]["vocab_size"]
    for seed in range(spec["seed"], spec["seed"] + 20):
        eos = V - 1
        for _ in range(4):
            shutil.rmtree(d, ignore_errors=True)
            save_fixture(build(spec, seed, eos), spec, d, ids)
            model = load(d)
            gen, _ = generations(model, ids, eos)
            used = {int(t) for v in gen.values() for t in v}
            eos_unused = eos not in used
            if eos_unused:
                break
            eos = max(set(range(V)) - used - {int(t) for t in ids})
        gap = greedy_gap(model, ids, gen["greedy_ids"], Checks())
        print(f"  seed {seed}: eos {eos} ({'never generated' if eos_unused else 'GENERATED'}), "
              f"min greedy gap {gap:.4g}")
        if gap > MIN_GAP and eos_unused:
            break
    else:
        raise RuntimeError(f"{name}: no seed gave a greedy gap > {MIN_GAP}")

    checks = Checks()
    check_files(name, spec, d, model, checks)
    emb = model.model.embed_tokens.weight
    info = dict(seed=seed, eos_token_id=eos, init_std=INIT_STD, embed_std=round(emb.std().item(), 4))
    if spec.get("clip_quantile"):
        info["clip_qkv"] = model.config.clip_qkv
        info["clip_fraction_per_layer"] = clip_fraction(model, ids)
        print(f"  clip_qkv {model.config.clip_qkv}: fraction of q/k/v clipped per layer "
              f"{info['clip_fraction_per_layer']}")
    nH, nKV, hd = shape_of(model)
    rope_spec = dict(theta=spec["config"]["rope_theta"], yarn=spec["config"].get("rope_scaling"))
    g, figures = dump(model, ids, eos, checks, rope_spec)
    info.update(figures)
    if "rope" in info:
        print(f"  RoPE per layer {getattr(model.config, 'layer_types', None)}: {info['rope']}")
    checks.true("gap", figures["min_greedy_gap"] > MIN_GAP)
    write_golden(os.path.join(d, "golden.safetensors"), g, name, info)
    checks.report(name)
    print(f"  H {model.config.hidden_size} L {len(model.model.layers)} nH {nH} nKV {nKV} hd {hd} V {V}; "
          f"embed std {info['embed_std']}; golden {os.path.getsize(os.path.join(d, 'golden.safetensors'))} B")
    return checks.failed


def dir_size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main_fixtures(out_dir, only):
    ids = seeded_prompt()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; prompt {ids.tolist()}")
    os.makedirs(out_dir, exist_ok=True)
    failed = {}
    for name, spec in FIXTURES.items():
        if only and name not in only:
            continue
        print(f"== {name}")
        try:
            failed[name] = make_fixture(name, spec, out_dir, ids)
        except Exception as e:  # keep going: one run of this script should report on all
            import traceback
            traceback.print_exc()
            failed[name] = [f"exception: {e!r}"]
    goldens = sum(os.path.getsize(os.path.join(out_dir, n, "golden.safetensors")) for n in FIXTURES
                  if os.path.exists(os.path.join(out_dir, n, "golden.safetensors")))
    print(f"goldens {goldens / 1e6:.3f} MB; all fixtures {dir_size(out_dir) / 1e6:.3f} MB")
    if not only:  # VERSIONS.txt is about all of them; each golden's metadata names its own versions
        with open(os.path.join(out_dir, "VERSIONS.txt"), "w") as f:
            f.write(f"Made by: python3 tests/make_goldens.py (torch on CPU, float32, eager attention)\n"
                    f"transformers {transformers.__version__}\ntorch {torch.__version__}\n"
                    f"safetensors {safetensors.__version__}\npython {sys.version.split()[0]}\n")
    bad = {k: v for k, v in failed.items() if v}
    print("ALL CHECKS PASSED" if not bad else f"FAILED: {json.dumps(bad, indent=1)}")
    return 1 if bad else 0


# ----------------------------------------------------------------------------------------
# Mode 2: an existing checkpoint and a sentencepiece tokenizer.

def main_checkpoint(args):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=args.sp_model)
    model = load(args.model)
    eos = model.generation_config.eos_token_id
    eos = eos if eos is not None else model.config.eos_token_id
    ids = torch.tensor(sp.encode(args.prompt), dtype=torch.int32)
    print(f"transformers {transformers.__version__}; {args.model}: prompt {ids.tolist()}, eos {eos}")
    checks = Checks()
    g, info = dump(model, ids, eos, checks)
    for k, text in enumerate(args.greedy_prompt):
        p = torch.tensor(sp.encode(text), dtype=torch.int32)
        g[f"prompt48_{k}"] = p
        g[f"greedy48_{k}"] = generate(model, p, eos, max_new_tokens=48)[0, len(p):].to(torch.int32)
    for k, text in enumerate(args.beam_prompt):   # beam search references (issue 6)
        p = torch.tensor(sp.encode(text), dtype=torch.int32)
        g[f"beamprompt_{k}"] = p
        for n in (2, 4):
            g[f"beam{n}_{k}"] = generate(model, p, eos, num_beams=n, max_new_tokens=32)[0, len(p):].to(torch.int32)
            print(f"  beam{n} '{text}': {g[f'beam{n}_{k}'].tolist()}")
    if info["min_greedy_gap"] <= MIN_GAP:
        print(f"  WARNING: near-tie in the greedy run (gap {info['min_greedy_gap']:.3g})")
    os.makedirs(args.out, exist_ok=True)
    write_golden(os.path.join(args.out, "golden.safetensors"), g, "checkpoint:" + os.path.basename(
        os.path.normpath(args.model)), dict(info, prompt=args.prompt, greedy_prompts=args.greedy_prompt))
    checks.report("checkpoint")
    return 1 if checks.failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default="tests/fixtures", help="mode 1: where the fixtures go")
    ap.add_argument("--only", action="append", default=[], choices=sorted(FIXTURES),
                    help="mode 1: make only this fixture (repeatable); the others are left as they are")
    ap.add_argument("--model", help="mode 2: checkpoint directory")
    ap.add_argument("--sp-model", help="mode 2: sentencepiece .model")
    ap.add_argument("--prompt", help="mode 2: prompt text")
    ap.add_argument("--beam-prompt", action="append", default=[],
                    help="mode 2: a prompt for the beam2_{k}/beam4_{k} references (32 new tokens)")
    ap.add_argument("--out", help="mode 2: output directory for golden.safetensors")
    ap.add_argument("--greedy-prompt", action="append", default=[], help="mode 2: extra 48-token greedy prompt")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(4)
    transformers.logging.set_verbosity_error()
    if args.model:
        if not (args.sp_model and args.prompt and args.out):
            ap.error("--model needs --sp-model, --prompt and --out")
        return main_checkpoint(args)
    return main_fixtures(args.out_dir, set(args.only))


if __name__ == "__main__":
    sys.exit(main())
