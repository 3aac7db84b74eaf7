"""The whole OLMo forward pass assembled in Python from olmo_kernels' ops and torch matmuls
reproduces the golden fixtures' logits (tests/fixtures, made by tests/make_goldens.py with
transformers): the prompt's logits [T, V], then 8 decode steps through a KVCache
(decode_logits [8, V]). Every family: OLMo-1 (LayerNorm, clip_qkv, tied embeddings), OLMo-2
(QK-norm, post-norms, GQA, head size 32), OLMo-3 (sliding windows, YaRN).

The precision follows the CUDA engine (docs/architecture.md, "Precision on the GPU"): weights,
GEMM inputs, attention inputs and the KV cache in the storage dtype; GEMMs accumulate and write
float32; the residual stream, norm statistics and RoPE math in float32, each result rounded
once. Bars are the engine's golden bars: rel-L2 <= 1e-4 in float32, <= 2e-2 per tensor in
bfloat16 (tests/test_golden.cpp), each bf16 decode step within 2.5e-2."""
import glob
import os

from gpu_env import NAME, errors, ok, torch  # skips without torch/CUDA/build

import pytest
import torch.nn.functional as F

import error_report

safetensors_torch = pytest.importorskip("safetensors.torch", reason="the safetensors package reads the fixtures")

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")
NAMES = sorted(n for n in os.listdir(FIXTURES) if os.path.exists(os.path.join(FIXTURES, n, "golden.safetensors")))
BARS = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2.5e-2)}  # (per tensor, per decode step)


class Model:
    """A fixture's checkpoint on the GPU in `dtype`, run layer by layer with olmo_kernels."""

    def __init__(self, folder, dtype):
        self.cfg = ok.load_config(folder)
        weights = {}
        for path in sorted(glob.glob(os.path.join(folder, "model*.safetensors"))):
            weights.update(safetensors_torch.load_file(path))
        self.w = {name: t.to("cuda", dtype) for name, t in weights.items()}
        if "lm_head.weight" not in self.w:  # tied (transformers 5 writes no lm_head then)
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.dtype = dtype
        self.olmo1 = self.cfg["model_type"] == "olmo"

    def mm(self, x, name):
        """x [T, in] · W[name]ᵀ: inputs in the storage dtype, float32 accumulate and output."""
        return x.to(self.dtype).float() @ self.w[name].float().T

    def post_norm(self, y, name):
        """OLMo-2/3 normalize each block's output before the residual add; OLMo-1 does not."""
        return y if self.olmo1 else ok.rms_norm(y, self.w[name], self.cfg["norm_eps"])

    def pre_norm(self, x):
        return ok.layer_norm(x) if self.olmo1 else x

    def attention(self, layer, x, cache, start):
        c, p, T = self.cfg, f"model.layers.{layer}.self_attn.", x.shape[0]
        nH, nKV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        q, k, v = (self.mm(x, p + f"{n}_proj.weight") for n in "qkv")
        if self.olmo1 and c["clip_qkv"] > 0:
            q, k, v = (t.clamp(-c["clip_qkv"], c["clip_qkv"]) for t in (q, k, v))
        elif not self.olmo1:  # QK-norm over the full width, before the split into heads
            q, k = ok.rms_norm(q, self.w[p + "q_norm.weight"], c["norm_eps"]), ok.rms_norm(k, self.w[p + "k_norm.weight"], c["norm_eps"])
        heads = lambda t, n: t.view(1, T, n, hd).transpose(1, 2)
        L = c["layers"][layer]
        pos = torch.arange(start, start + T, device="cuda")
        q = ok.rope(heads(q, nH), pos, L["inv_freq"], L["attention_factor"]).to(self.dtype)
        k = ok.rope(heads(k, nKV), pos, L["inv_freq"], L["attention_factor"]).to(self.dtype)
        out = cache.attend(layer, q, k, heads(v, nKV).to(self.dtype), window=L["window"] or None)
        return self.mm(out.transpose(1, 2).reshape(T, nH * hd), p + "o_proj.weight")

    def forward(self, ids, cache):
        """Logits [T, V] of ids appended to the cache's sequence (batch 1)."""
        start = cache.lengths[0]
        x = self.w["model.embed_tokens.weight"][ids].float()  # the residual stream, float32
        for layer in range(self.cfg["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            x = x + self.post_norm(self.attention(layer, self.pre_norm(x), cache, start), p + "post_attention_layernorm.weight")
            xn = self.pre_norm(x)
            m = (F.silu(self.mm(xn, p + "mlp.gate_proj.weight")) * self.mm(xn, p + "mlp.up_proj.weight")).to(self.dtype)
            x = x + self.post_norm(self.mm(m, p + "mlp.down_proj.weight"), p + "post_feedforward_layernorm.weight")
        cache.advance(len(ids))
        final = ok.layer_norm(x) if self.olmo1 else ok.rms_norm(x, self.w["model.norm.weight"], self.cfg["norm_eps"])
        return self.mm(final, "lm_head.weight")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=NAME.get)
@pytest.mark.parametrize("fixture", NAMES)
def test_forward_reproduces_golden_logits(fixture, dtype):
    assert len(NAMES) >= 5, "tests/fixtures is missing goldens"
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 GEMMs, as the engine's cuBLAS calls
    folder = os.path.join(FIXTURES, fixture)
    golden = safetensors_torch.load_file(os.path.join(folder, "golden.safetensors"))
    model = Model(folder, dtype)
    c = model.cfg
    prompt, decode_ids = golden["prompt_ids"].long().cuda(), golden["decode_ids"].long().cuda()
    cache = ok.KVCache(c["num_hidden_layers"], 1, c["num_key_value_heads"], c["head_dim"],
                       len(prompt) + len(decode_ids), dtype=dtype)
    tensor_bar, step_bar = BARS[dtype]

    logits = model.forward(prompt, cache)
    rel, mx = errors(logits, golden["logits"].cuda().double())
    error_report.add("olmo forward", f"{fixture} prompt logits", NAME[dtype], (rel, mx))
    assert rel <= tensor_bar, f"{fixture} {NAME[dtype]}: prompt logits rel-L2 {rel:.2e} (bar {tensor_bar})"

    steps = torch.cat([model.forward(decode_ids[s:s + 1], cache) for s in range(len(decode_ids))])
    want = golden["decode_logits"].cuda().double()
    rel, mx = errors(steps, want)
    error_report.add("olmo decode", f"{fixture} decode_logits [8, V]", NAME[dtype], (rel, mx))
    assert rel <= tensor_bar, f"{fixture} {NAME[dtype]}: decode_logits rel-L2 {rel:.2e} (bar {tensor_bar})"
    for s in range(len(decode_ids)):
        step = errors(steps[s], want[s])[0]
        assert step <= step_bar, f"{fixture} {NAME[dtype]}: decode step {s} rel-L2 {step:.2e} (bar {step_bar})"
