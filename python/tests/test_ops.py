"""Every olmo_kernels op against float64 reference math on awkward shapes, in float32, float16 and
bfloat16, with the engine kernel tests' bars (rel-L2 and max-abs); the attention errors are
recorded next to SDPA's on the same inputs, the norms' next to torch's own (printed at the end
of the run). Then the argument checks: each bad call raises a clear error."""
import math

from gpu_env import DTYPES, NAME, assert_close, bshd, errors, ok, torch  # skips without torch/CUDA/build

import pytest
import torch.nn.functional as F

import error_report
from reference import ref_attention, ref_decode, visible

HEAD_DIMS = [8, 16, 32, 64, 80, 96, 128, 192, 256]


def sdpa_errors(q, k, v, ref, causal=True, window=0):
    """SDPA's own (rel-L2, max-abs) on the same inputs (its default backend choice), or None."""
    try:
        if causal and not window and q.shape[2] == k.shape[2]:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            mask = visible(q.shape[2], k.shape[2], causal, window)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return errors(out, ref)
    except Exception:  # a shape SDPA does not take
        return None


def check_attention(group, case, q, k, v, causal=True, window=0):
    out = ok.flash_attention(q, k, v, causal=causal, window=window or None)
    ref = ref_attention(q, k, v, causal, window)
    assert out.shape == q.shape
    ours = assert_close(out, ref, q.dtype, f"{group} {case}")
    error_report.add(group, case, NAME[q.dtype], ours, sdpa_errors(q, k, v, ref, causal, window))


# ---- flash_attention ----

@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("hd", HEAD_DIMS)
def test_flash_every_head_size(dtype, hd):
    torch.manual_seed(hd)
    q, k, v = bshd(1, 63, 4, hd, dtype), bshd(1, 63, 2, hd, dtype), bshd(1, 63, 2, hd, dtype)
    check_attention("flash head sizes", f"hd {hd}, 63 tokens, GQA 2", q, k, v)


# (Sq, Sk, query heads per KV head): lengths 1, 63, 1000, causal offsets (Sq < Sk), GQA 1..8
LENGTHS = [(1, 1, 1), (63, 63, 2), (1000, 1000, 4), (1, 1000, 8), (63, 1000, 3), (1000, 1063, 1), (200, 1000, 5)]


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("Sq,Sk,g", LENGTHS)
def test_flash_lengths_offsets_gqa(dtype, Sq, Sk, g):
    torch.manual_seed(Sq * 7 + Sk)
    q, k, v = bshd(2, Sq, 2 * g, 128, dtype), bshd(2, Sk, 2, 128, dtype), bshd(2, Sk, 2, 128, dtype)
    check_attention("flash lengths/GQA", f"Sq {Sq}, Sk {Sk}, GQA {g}, batch 2", q, k, v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=NAME.get)
@pytest.mark.parametrize("window", [1, 7, 64, 500])
@pytest.mark.parametrize("Sq,Sk", [(1000, 1000), (63, 1000), (1, 700)])
def test_flash_windows(dtype, window, Sq, Sk):
    torch.manual_seed(window)
    q, k, v = bshd(1, Sq, 8, 64, dtype), bshd(1, Sk, 2, 64, dtype), bshd(1, Sk, 2, 64, dtype)
    check_attention("flash windows", f"window {window}, Sq {Sq}, Sk {Sk}", q, k, v, window=window)


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("Sq,Sk", [(1, 1), (63, 1000), (1000, 63), (1500, 100)])
def test_flash_not_causal(dtype, Sq, Sk):
    torch.manual_seed(Sq + Sk)
    q, k, v = bshd(2, Sq, 4, 128, dtype), bshd(2, Sk, 2, 128, dtype), bshd(2, Sk, 2, 128, dtype)
    check_attention("flash non-causal", f"Sq {Sq}, Sk {Sk}", q, k, v, causal=False)


def test_flash_any_layout_same_result():
    """Tensors laid out [B, H, S, D] (copied) or as strided slices give the same output as the
    [B, S, H, D] views read in place."""
    torch.manual_seed(0)
    q, k, v = bshd(2, 100, 8, 64, torch.bfloat16), bshd(2, 120, 2, 64, torch.bfloat16), bshd(2, 120, 2, 64, torch.bfloat16)
    want = ok.flash_attention(q, k, v)
    got = ok.flash_attention(q.contiguous(), k.contiguous(), v.contiguous())
    assert torch.equal(got, want)
    wide = torch.randn(2, 120, 4, 64, device="cuda").to(torch.bfloat16)
    wide[:, :, 1:3] = k.transpose(1, 2)
    got = ok.flash_attention(q, wide[:, :, 1:3].transpose(1, 2), v)  # heads 1..2 of a wider tensor
    assert torch.equal(got, want)
    assert got.transpose(1, 2).is_contiguous()


def test_flash_scale():
    torch.manual_seed(1)
    q, k, v = bshd(1, 50, 4, 64, torch.float32), bshd(1, 50, 4, 64, torch.float32), bshd(1, 50, 4, 64, torch.float32)
    out = ok.flash_attention(q, k, v, scale=0.3)
    assert_close(out, ref_attention(q, k, v, scale=0.3), torch.float32, "scale 0.3")


# ---- decode_attention ----

def check_decode(case, dtype, hd, g, lengths, capacity, T=1, window=0, nKV=2):
    B = len(lengths)
    q, k, v = bshd(B, T, g * nKV, hd, dtype), bshd(B, capacity, nKV, hd, dtype), bshd(B, capacity, nKV, hd, dtype)
    out = ok.decode_attention(q, k, v, lengths, window=window or None)
    ref = ref_decode(q, k, v, lengths, window)
    ours = assert_close(out, ref, dtype, f"decode {case}")
    # SDPA on the same inputs: a padding mask per sequence
    i = torch.tensor(lengths, device="cuda")[:, None, None] - T + torch.arange(T, device="cuda")[None, :, None]
    j = torch.arange(capacity, device="cuda")[None, None, :]
    mask = (j <= i) & ((j > i - window) if window else True)
    try:
        theirs = errors(F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], enable_gqa=True), ref)
    except Exception:
        theirs = None
    error_report.add("decode", case, NAME[dtype], ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("hd", HEAD_DIMS)
def test_decode_every_head_size(dtype, hd):
    torch.manual_seed(hd)
    check_decode(f"hd {hd}, GQA 4, lengths 1/63/1000/777", dtype, hd, 4, [1, 63, 1000, 777], 1024)


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("g", [1, 2, 3, 5, 8])
def test_decode_gqa(dtype, g):
    torch.manual_seed(g)
    check_decode(f"GQA {g}, hd 128", dtype, 128, g, [1000, 5, 63], 1024)


@pytest.mark.parametrize("capacity", [1001, 1000, 1024, 3000])
def test_decode_cache_capacities(capacity):
    """Capacities whose row stride is not a multiple of 8 run one launch per sequence; others one
    launch over the batch, blocks tiling the batch."""
    torch.manual_seed(capacity)
    check_decode(f"capacity {capacity}", torch.bfloat16, 64, 2, [capacity, 1, 500], capacity)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=NAME.get)
@pytest.mark.parametrize("window", [1, 100])
def test_decode_window(dtype, window):
    torch.manual_seed(window)
    check_decode(f"window {window}", dtype, 128, 4, [1000, 50, 101], 1024, window=window)


@pytest.mark.parametrize("T,g", [(2, 8), (4, 4), (16, 1)])
def test_decode_several_new_tokens(T, g):
    torch.manual_seed(T)
    check_decode(f"{T} new tokens, GQA {g}", torch.bfloat16, 128, g, [T, 100, 1000], 1024, T=T)


def test_decode_batch_of_one_odd_capacity():
    torch.manual_seed(3)
    check_decode("batch 1, capacity 77", torch.float16, 96, 3, [77], 77)


# ---- paged attention ----

def paged(k, v, lengths, bs, window=0, T=1):
    """k, v [B, nKV, S, D] -> pools [N, bs, nKV, D] with the blocks in shuffled order, and the
    table (-1 for blocks past a sequence's length and for blocks wholly before its window)."""
    B, nKV, S, D = k.shape
    M = -(-S // bs)
    perm = torch.randperm(B * M, device="cuda")
    kp = torch.empty(B * M, bs, nKV, D, dtype=k.dtype, device="cuda")
    vp = torch.empty_like(kp)
    pad = M * bs - S
    kb = F.pad(k.transpose(1, 2), (0, 0, 0, 0, 0, pad)).reshape(B * M, bs, nKV, D)
    vb = F.pad(v.transpose(1, 2), (0, 0, 0, 0, 0, pad)).reshape(B * M, bs, nKV, D)
    kp[perm], vp[perm] = kb, vb
    table = perm.view(B, M).int()
    for b, n in enumerate(lengths):
        table[b, -(-n // bs):] = -1
        if window:
            table[b, :max(0, n - T - window + 1) // bs] = -1
    return kp, vp, table


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("bs", [8, 16, 64])
@pytest.mark.parametrize("window", [0, 50])
def test_paged_decode(dtype, bs, window):
    torch.manual_seed(bs + window)
    lengths, hd, T = [5, 1000, 63], 128, 1
    q, k, v = bshd(3, T, 8, hd, dtype), bshd(3, 1000, 2, hd, dtype), bshd(3, 1000, 2, hd, dtype)
    kp, vp, table = paged(k, v, lengths, bs, window, T)
    out = ok.paged_decode_attention(q, kp, vp, table, lengths, window=window or None)
    ours = assert_close(out, ref_decode(q, k, v, lengths, window), dtype, "paged decode")
    error_report.add("paged decode", f"block {bs}, window {window}", NAME[dtype], ours)


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("bs", [8, 16])
@pytest.mark.parametrize("window", [0, 30])
def test_paged_prefill(dtype, bs, window):
    torch.manual_seed(bs * 3 + window)
    lengths, hd, T = [63, 1000], 64, 63
    q, k, v = bshd(2, T, 4, hd, dtype), bshd(2, 1000, 4, hd, dtype), bshd(2, 1000, 4, hd, dtype)
    kp, vp, table = paged(k, v, lengths, bs, window, T)
    out = ok.paged_flash_attention(q, kp, vp, table, lengths, window=window or None)
    ours = assert_close(out, ref_decode(q, k, v, lengths, window), dtype, "paged prefill")
    error_report.add("paged prefill", f"block {bs}, window {window}", NAME[dtype], ours)


# ---- norms ----

NORM_SHAPES = [(1, 8), (63, 1000), (5, 4099), (3, 7, 64)]


@pytest.mark.parametrize("x_dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("w_dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
def test_rms_norm(x_dtype, w_dtype, shape):
    torch.manual_seed(shape[-1])
    x = (torch.randn(shape, device="cuda") * 3).to(x_dtype)
    w = (1 + 0.2 * torch.randn(shape[-1], device="cuda")).to(w_dtype)
    out = ok.rms_norm(x, w, eps=1e-6)
    xd = x.double()
    ref = w.double() * (xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-6))
    assert out.dtype == x_dtype and out.shape == x.shape
    ours = assert_close(out, ref, x_dtype, f"rms_norm {shape}")
    theirs = errors(F.rms_norm(x, (shape[-1],), w.to(x_dtype), eps=1e-6), ref)
    error_report.add("rms_norm", f"{shape}, weight {NAME[w_dtype]}", NAME[x_dtype], ours, theirs)


def test_rms_norm_strided_rows():
    """A column range of a wider tensor (the q part of a fused qkv) is read in place."""
    torch.manual_seed(5)
    qkv = torch.randn(37, 3 * 256, device="cuda")
    w = torch.randn(256, device="cuda").to(torch.bfloat16)
    got = ok.rms_norm(qkv[:, 256:512], w)
    assert torch.equal(got, ok.rms_norm(qkv[:, 256:512].contiguous(), w))


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
@pytest.mark.parametrize("offset", [0.0, 100.0])
def test_layer_norm(dtype, shape, offset):
    """OLMo-1's LayerNorm (no weight or bias), also with |mean| >> std (two passes)."""
    torch.manual_seed(shape[0])
    x = (torch.randn(shape, device="cuda") + offset).to(dtype)
    out = ok.layer_norm(x)
    xd = x.double()
    ref = (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + 1e-5)
    ours = assert_close(out, ref, dtype, f"layer_norm {shape} offset {offset}")
    theirs = errors(F.layer_norm(x, (shape[-1],), eps=1e-5), ref)
    error_report.add("layer_norm", f"{shape}, offset {offset}", NAME[dtype], ours, theirs)


# ---- RoPE ----

YARN = dict(factor=4.0, original_max_position_embeddings=256, beta_fast=32.0, beta_slow=1.0)


def py_inv_freq(hd, theta, yarn=None):
    """The architecture doc's formulas in float64, independent of src/config.cpp."""
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    if yarn:
        def dim(r):
            return hd * math.log(yarn["original_max_position_embeddings"] / (2 * math.pi * r)) / (2 * math.log(theta))
        low, high = max(math.floor(dim(yarn["beta_fast"])), 0), min(math.ceil(dim(yarn["beta_slow"])), hd - 1)
        ramp = ((torch.arange(hd // 2, dtype=torch.float64) - low) / max(high - low, 1e-3)).clamp(0, 1)
        inv = inv / yarn["factor"] * ramp + inv * (1 - ramp)
    return inv


@pytest.mark.parametrize("yarn", [None, YARN], ids=["default", "yarn"])
@pytest.mark.parametrize("hd", [8, 64, 128])
def test_rope_inv_freq(yarn, hd):
    got = ok.rope_inv_freq(hd, 500000.0, yarn)
    assert got.dtype == torch.float32 and got.shape == (hd // 2,)
    torch.testing.assert_close(got.double(), py_inv_freq(hd, 500000.0, yarn), rtol=2e-6, atol=0)


def ref_rope(x, pos, inv_freq, factor):
    """x [B, H, S, D]; the angle in float32 as the kernel (and transformers) compute it."""
    angle = (pos.float()[..., None] * inv_freq.cuda()).double()  # [S, D/2] or [B, S, D/2]
    if angle.dim() == 3:
        angle = angle[:, None]
    c, s = torch.cos(angle) * factor, torch.sin(angle) * factor
    a, b = x.double().chunk(2, -1)
    return torch.cat([a * c - b * s, b * c + a * s], -1)


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("yarn", [None, YARN], ids=["default", "yarn"])
@pytest.mark.parametrize("batch_positions", [False, True])
def test_rope(dtype, yarn, batch_positions):
    torch.manual_seed(2)
    B, H, S, D = 2, 6, 63, 128
    x = bshd(B, S, H, D, dtype)
    pos = torch.randint(0, 70000, (B, S) if batch_positions else (S,), device="cuda")
    inv = ok.rope_inv_freq(D, 500000.0, yarn)
    factor = 1.2 if yarn else 1.0
    out = ok.rope(x, pos, inv, factor)
    ours = assert_close(out, ref_rope(x, pos, inv, factor), dtype, "rope")
    error_report.add("rope", f"{'yarn' if yarn else 'default'}, positions < 70000", NAME[dtype], ours)


@pytest.mark.parametrize("cache_dtype", DTYPES, ids=NAME.get)
@pytest.mark.parametrize("qkv_fp32", [True, False])
def test_rope_qkv_writes_the_paged_cache(cache_dtype, qkv_fp32):
    torch.manual_seed(4)
    T, nH, nKV, D, bs = 37, 8, 2, 64, 16
    qkv = torch.randn(T, (nH + 2 * nKV) * D, device="cuda").to(torch.float32 if qkv_fp32 else cache_dtype)
    kp = torch.zeros(10, bs, nKV, D, device="cuda", dtype=cache_dtype)
    vp = torch.zeros_like(kp)
    slots = torch.randperm(10 * bs, device="cuda")[:T]
    pos = torch.arange(100, 100 + T, device="cuda")
    inv = ok.rope_inv_freq(D, 10000.0)
    q = ok.rope_qkv(qkv, pos, kp, vp, slots, inv)
    x = qkv.view(1, T, nH + 2 * nKV, D).transpose(1, 2)
    assert_close(q, ref_rope(x[:, :nH], pos, inv, 1.0)[0].transpose(0, 1), cache_dtype, "rope_qkv q")
    k_rows = kp.view(-1, nKV, D)[slots].transpose(0, 1)[None]
    assert_close(k_rows, ref_rope(x[:, nH:nH + nKV], pos, inv, 1.0), cache_dtype, "rope_qkv k")
    assert torch.equal(vp.view(-1, nKV, D)[slots], x[0, nH + nKV:].transpose(0, 1).to(cache_dtype))


def test_load_config_reads_yarn_and_windows():
    import os
    fixture = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "olmo3_swa_yarn")
    cfg = ok.load_config(fixture)
    assert cfg["model_type"] == "olmo3" and cfg["num_key_value_heads"] == 1
    assert [layer["window"] for layer in cfg["layers"]] == [6, 6, 6, 0]
    full, sliding = cfg["layers"][3], cfg["layers"][0]
    assert full["attention_factor"] == pytest.approx(1.2) and sliding["attention_factor"] == 1.0
    assert torch.equal(full["inv_freq"], ok.rope_inv_freq(64, 500000.0, YARN))
    assert torch.equal(sliding["inv_freq"], ok.rope_inv_freq(64, 500000.0))


# ---- argument checks ----

def bad_calls():
    """(name, call, text the error must contain, the exception's type)"""
    c = dict(device="cuda", dtype=torch.bfloat16)
    q, k = torch.randn(1, 4, 10, 64, **c), torch.randn(1, 2, 10, 64, **c)
    pool, table = torch.zeros(4, 16, 2, 64, **c), torch.zeros(1, 4, dtype=torch.int32, device="cuda")
    pool12 = torch.zeros(4, 12, 2, 64, **c)
    inv = ok.rope_inv_freq(64)
    V, T, R = ValueError, TypeError, RuntimeError
    return [
        ("cpu tensors", lambda: ok.flash_attention(q.cpu(), k.cpu(), k.cpu()), "must be a CUDA tensor", T),
        ("int dtype", lambda: ok.flash_attention(q.int(), k.int(), k.int()), "must be float32, float16 or bfloat16", T),
        ("mixed dtypes", lambda: ok.flash_attention(q, k.half(), k), "one dtype for q, k and v", T),
        ("3-D q", lambda: ok.flash_attention(q[0], k, k), "must be 4-D", V),
        ("head_dim 100", lambda: ok.flash_attention(q[..., :50].repeat(1, 1, 1, 2), k[..., :50].repeat(1, 1, 1, 2),
                                                    k[..., :50].repeat(1, 1, 1, 2)), "head_dim 100 is not supported", V),
        ("head_dim mismatch", lambda: ok.flash_attention(q, k[..., :32], k[..., :32]), "head_dim", V),
        ("3 heads over 2", lambda: ok.flash_attention(q[:, :3], k, k), "not a multiple", V),
        ("more queries than keys", lambda: ok.flash_attention(q, k[:, :, :5], k[:, :, :5]), "Sq <= Sk", V),
        ("k and v differ", lambda: ok.flash_attention(q, k, k[:, :, :5]), "of one shape", V),
        ("negative window", lambda: ok.flash_attention(q, k, k, window=-1), "positive int", V),
        ("window without causal", lambda: ok.flash_attention(q, k, k, causal=False, window=4), "needs causal=True", V),
        ("length over the cache", lambda: ok.decode_attention(q[:, :, :1], k, k, [11]), "lengths[0] = 11", V),
        ("length 0", lambda: ok.decode_attention(q[:, :, :1], k, k, [0]), "lengths[0] = 0", V),
        ("lengths count", lambda: ok.decode_attention(q[:, :, :1], k, k, [3, 4]), "2 lengths for a batch of 1", V),
        ("decode rows", lambda: ok.decode_attention(torch.randn(1, 16, 3, 64, **c), k, k, [5]), "at most 16", V),
        ("float lengths", lambda: ok.decode_attention(q[:, :, :1], k, k, torch.tensor([1.5])), "lengths must be", V),
        ("table entry", lambda: ok.paged_decode_attention(q[:, :, :1], pool, pool, table + 7, [20]), "outside [0, 4)", V),
        ("table dtype", lambda: ok.paged_decode_attention(q[:, :, :1], pool, pool, table.long(), [20]), "int32", T),
        ("block size", lambda: ok.paged_decode_attention(q[:, :, :1], pool12, pool12, table, [20]), "power of two", V),
        ("length over table", lambda: ok.paged_flash_attention(q, pool, pool, table, [65]), "lengths[0] = 65", V),
        ("rms weight", lambda: ok.rms_norm(q, torch.ones(32, **c)), "last dim", V),
        ("layer_norm cpu", lambda: ok.layer_norm(torch.ones(4, 4)), "must be a CUDA tensor", T),
        ("rope inv_freq", lambda: ok.rope(q, torch.arange(10), inv[:16]), "inv_freq must be", V),
        ("rope positions", lambda: ok.rope(q, torch.arange(9), inv), "positions must be", V),
        ("rope float positions", lambda: ok.rope(q, torch.ones(10), inv), "int32 or int64", T),
        ("rope_qkv slots", lambda: ok.rope_qkv(torch.randn(3, 8 * 64, **c), torch.arange(3), pool, pool,
                                               torch.tensor([0, 1, 64]), inv), "slots must lie in [0, 64)", V),
        ("rope_qkv width", lambda: ok.rope_qkv(torch.randn(3, 4 * 64, **c), torch.arange(3), pool, pool,
                                               torch.arange(3), inv), "n_heads > 0", V),
        ("yarn keys", lambda: ok.rope_inv_freq(64, 1e4, {"factor": 2.0}), "original_max_position_embeddings", V),
        ("scale inf", lambda: ok.flash_attention(q, k, k, scale=float("inf")), "scale must be finite", V),
        ("eps nan", lambda: ok.rms_norm(q, torch.ones(64, **c), eps=float("nan")), "eps must be finite", V),
        ("rope factor nan", lambda: ok.rope(q, torch.arange(10), inv, float("nan")), "attention_factor", V),
        ("rope_qkv float slots", lambda: ok.rope_qkv(torch.randn(3, 8 * 64, **c), torch.arange(3), pool, pool,
                                                     torch.ones(3), inv), "int32 or int64", T),
        # 2^32 would wrap to 0 in int32: the range is checked on the values as given
        ("rope_qkv slot 2^32", lambda: ok.rope_qkv(torch.randn(3, 8 * 64, **c), torch.arange(3), pool, pool,
                                                   torch.tensor([0, 1, 2 ** 32]), inv), "slots must lie in [0, 64)",
         V),
        ("yarn factor nan", lambda: ok.rope_inv_freq(64, 1e4, {"factor": float("nan"),
                                                               "original_max_position_embeddings": 256}),
         "must be finite", V),
        ("theta inf", lambda: ok.rope_inv_freq(64, float("inf")), "theta must be finite", V),
        ("missing config", lambda: ok.load_config("/nonexistent"), "cannot open", R),
    ]


BAD_CALLS = bad_calls()


@pytest.mark.parametrize("name,call,message,kind", BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_bad_calls_raise_clear_errors(name, call, message, kind):
    with pytest.raises(Exception) as e:
        call()
    assert type(e.value) is kind and message in str(e.value), f"{name}: {type(e.value).__name__}: {e.value}"


def test_empty_inputs_give_empty_outputs():
    """No queries, heads, batch or rows: an empty result of the right shape, no launch."""
    c = dict(device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 10, 64, **c)
    for q in [torch.randn(1, 4, 0, 64, **c), torch.randn(1, 0, 10, 64, **c)]:
        assert ok.flash_attention(q, k, k).shape == q.shape
    assert ok.flash_attention(torch.randn(0, 4, 10, 64, **c), k[:0], k[:0]).shape == (0, 4, 10, 64)
    assert ok.decode_attention(torch.randn(0, 4, 1, 64, **c), k[:0], k[:0], []).shape == (0, 4, 1, 64)
    assert ok.rms_norm(torch.randn(0, 64, **c), torch.ones(64, **c)).shape == (0, 64)
    assert ok.layer_norm(torch.randn(3, 0, 64, **c)).shape == (3, 0, 64)
    torch.cuda.synchronize()
