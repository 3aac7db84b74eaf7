"""olmo_kernels: the CUDA kernels of olmo.cu (kernels/*.cuh) as PyTorch ops.

The same attention (flash prefill, flash-decoding), LayerNorm/RMSNorm and RoPE kernels the
engine runs, on CUDA tensors in float32, float16 or bfloat16 (Hopper, sm_90a), on the current
CUDA stream. Build once with `python3 -m pip install --no-build-isolation --no-deps -e python/`
from the repository root (no network needed; README.md says more); `python3 -m olmo_kernels.bench`
compares the attention with SDPA's.

Attention tensors have SDPA's shape [batch, heads, seq, head_dim]. They are read in place when
their memory is ordered [batch, seq, heads, head_dim], which is what
`x.view(B, S, H, D).transpose(1, 2)` gives (a model's q/k/v projections, reshaped as in
Hugging Face models); other layouts are copied once. Outputs come back in that layout too, so
`out.transpose(1, 2).reshape(B, S, H * D)` is free. Head sizes: multiples of 8 up to 256.
GQA: q may have any multiple of k's heads (query head h reads KV head h // (nH // nKV)).
Causal attention with fewer queries than keys puts the queries at the last positions
(bottom-right aligned, as flash-attn; SDPA's is_causal aligns top-left).
A window W keeps, for the query at position i, the keys i - W + 1 .. i.

Every op checks its arguments before it reads them and raises ValueError / TypeError naming the
op and the argument (shape, dtype, device, head size, lengths, non-finite scalars); a kernel's
own refusal is a RuntimeError. Empty inputs give empty outputs. Lengths
are host integers (a list, or a tensor, which is read back to the host). Ops that upload small
position and block-table arrays do so with a pinned non-blocking copy, so they are not for use
inside CUDA-graph capture.

Example::

    import torch, olmo_kernels as ok
    q = torch.randn(1, 4096, 32, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(1, 4096, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn_like(k)
    out = ok.flash_attention(q, k, v, causal=True)           # [1, 32, 4096, 128]
"""
import torch

try:
    from . import _C
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "olmo_kernels._C is not built (or not for this torch): run "
        "`python3 -m pip install --no-build-isolation --no-deps -e python/` "
        f"from the repository root on a machine with nvcc and a CUDA build of torch ({e})") from e

from .kv_cache import KVCache

__all__ = ["flash_attention", "decode_attention", "paged_flash_attention", "paged_decode_attention", "rms_norm",
           "layer_norm", "rope", "rope_qkv", "rope_inv_freq", "load_config", "KVCache"]


def _window(window):
    if window is None:
        return 0
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise ValueError(f"window must be None or a positive int, got {window!r}")
    return window


def _scale(q, scale):
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
    if scale is not None:
        return float(scale)
    return q.shape[-1] ** -0.5 if q.dim() and q.shape[-1] > 0 else 1.0


def _lengths(lengths):
    """Host ints from a list, tuple or tensor (a CUDA tensor is read back: a sync)."""
    if isinstance(lengths, torch.Tensor):
        if lengths.dtype.is_floating_point or lengths.dim() != 1:
            raise ValueError(f"lengths must be a 1-D integer tensor or a list of ints, got {lengths.dtype} "
                             f"of shape {tuple(lengths.shape)}")
        return [int(n) for n in lengths.tolist()]
    try:
        return [int(n) for n in lengths]
    except (TypeError, ValueError):
        raise ValueError(f"lengths must be a list of ints or a 1-D integer tensor, got {lengths!r}") from None


def flash_attention(q, k, v, causal=True, window=None, scale=None):
    """softmax(q·kᵀ·scale + mask)·v with the engine's flash-attention kernel.

    q [B, nH, Sq, D], k and v [B, nKV, Sk, D] (SDPA's shape; nH a multiple of nKV), one dtype.
    causal=True: the queries are the last Sq of the Sk positions (Sq <= Sk), query t sees keys
    0 .. Sk - Sq + t; with window=W only the last W of those. causal=False: every query sees
    every key (this runs on the decode kernel, one launch per 1024 queries: correct, not tuned;
    at most 16 query heads per KV head). scale defaults to D ** -0.5.
    Returns [B, nH, Sq, D] (memory ordered [B, Sq, nH, D]).
    """
    return _C.flash_attention(q, k, v, bool(causal), _window(window), _scale(q, scale))


def decode_attention(q, k_cache, v_cache, lengths, window=None, scale=None):
    """Flash-decoding: a few new queries per sequence over a KV cache, all sequences in one launch.

    q [B, nH, T, D] (T new tokens per sequence, usually 1; T·nH/nKV <= 16), k_cache and v_cache
    [B, nKV, S_cap, D] with the new tokens' keys and values already written. lengths[b]: the
    keys of sequence b, its T new ones included (T <= lengths[b] <= S_cap); its queries sit at
    positions lengths[b] - T .. lengths[b] - 1 and see the keys before them (the last `window`
    ones with a window). Keys past lengths[b] are never read. The cache is read in place when its
    memory is ordered [B, S_cap, nKV, D] (KVCache keeps it so). Returns [B, nH, T, D].
    """
    return _C.decode_attention(q, k_cache, v_cache, _lengths(lengths), _window(window), _scale(q, scale))


def paged_flash_attention(q, k_pool, v_pool, block_table, lengths, window=None, scale=None, check_table=True):
    """Prefill over a paged KV cache (the engine's own layout), one kernel launch per sequence.

    q [B, nH, T, D]; k_pool and v_pool [num_blocks, block_size, nKV, D] (block_size a power of
    two >= 8); block_table [B, max_blocks] int32: position p of sequence b is row p % block_size
    of block block_table[b, p // block_size]. lengths[b] counts sequence b's keys, its T new ones
    included; the queries are its last T positions. check_table (default True) verifies, with one
    sync, that every entry the lengths use names a block of the pool. Returns [B, nH, T, D].
    """
    return _C.paged_flash_attention(q, k_pool, v_pool, block_table, _lengths(lengths), _window(window),
                                    _scale(q, scale), bool(check_table))


def paged_decode_attention(q, k_pool, v_pool, block_table, lengths, window=None, scale=None, check_table=True):
    """decode_attention over a paged KV cache: arguments as paged_flash_attention, one launch for
    the whole batch, T·nH/nKV <= 16. Returns [B, nH, T, D]."""
    return _C.paged_decode_attention(q, k_pool, v_pool, block_table, _lengths(lengths), _window(window),
                                     _scale(q, scale), bool(check_table))


def rms_norm(x, weight, eps=1e-6):
    """weight · x / sqrt(mean(x²) + eps) over the last dim (OLMo-2/3's RMSNorm and QK-norm).

    x [..., H] in any of the three dtypes, weight [H] in any of them; statistics and the product
    in float32, the result rounded once to x's dtype. Rows of x may be strided (a column slice of
    a wider tensor is read in place)."""
    return _C.rms_norm(x, weight, float(eps))


def layer_norm(x, eps=1e-5):
    """(x - mean(x)) / sqrt(var(x) + eps) over the last dim, with no weight or bias: OLMo-1's
    LayerNorm (eps fixed at 1e-5 in the model). Statistics in float32 (two passes), the result
    rounded once to x's dtype."""
    return _C.layer_norm(x, float(eps))


def rope(x, positions, inv_freq, attention_factor=1.0):
    """Rotary position embedding, "rotate_half" layout (element d pairs with d + D/2).

    x [B, H, S, D]; positions [S] or [B, S] (ints); inv_freq [D/2] from rope_inv_freq (default
    RoPE or YaRN; move it to the GPU once, else each call copies it there); attention_factor
    multiplies cos and sin (YaRN's, else 1). Math in float32,
    one rounding to x's dtype. Runs the engine's rope_qkv kernel with no key or value heads.
    Returns [B, H, S, D] (memory ordered [B, S, H, D])."""
    return _C.rope(x, positions, inv_freq, float(attention_factor))


def rope_qkv(qkv, positions, k_pool, v_pool, slots, inv_freq, attention_factor=1.0, check_slots=True):
    """The engine's fused step after the qkv projection: split, RoPE, write K/V into the cache.

    qkv [T, (nH + 2·nKV)·D] (each row nH query heads, nKV key heads, nKV value heads; float32 or
    the pools' dtype), positions [T], k_pool / v_pool [num_blocks, block_size, nKV, D] (written in
    place), slots [T]: the pool row (block · block_size + offset) of each token's K/V.
    check_slots (default True) verifies them with one sync. Returns q [T, nH, D] rotated, in
    the pools' dtype."""
    return _C.rope_qkv(qkv, positions, k_pool, v_pool, slots, inv_freq, float(attention_factor), bool(check_slots))


def rope_inv_freq(head_dim, theta=10000.0, yarn=None):
    """inv_freq [head_dim/2] (float32, CPU) as the engine computes it (src/config.cpp).

    theta^(-2d/head_dim); with yarn, a dict of config.json's YaRN keys (factor,
    original_max_position_embeddings, beta_fast=32, beta_slow=1), YaRN's blend of interpolated
    and original frequencies. YaRN's attention factor is rope's attention_factor argument;
    load_config gives both for a checkpoint."""
    if yarn is None:
        return _C.rope_inv_freq(int(head_dim), float(theta), False, 1.0, 0, 32.0, 1.0)
    if "factor" not in yarn or "original_max_position_embeddings" not in yarn:
        raise ValueError("yarn needs 'factor' and 'original_max_position_embeddings'")
    return _C.rope_inv_freq(int(head_dim), float(theta), True, float(yarn["factor"]),
                            int(yarn["original_max_position_embeddings"]), float(yarn.get("beta_fast", 32.0)),
                            float(yarn.get("beta_slow", 1.0)))


def load_config(path):
    """A checkpoint folder's config.json read by the engine's own parser (src/config.cpp).

    Returns a dict: model_type, hidden_size, intermediate_size, num_hidden_layers,
    num_attention_heads, num_key_value_heads, head_dim, vocab_size, max_position_embeddings,
    norm_eps, clip_qkv (0 = off), tie_word_embeddings, eos_token_ids, and layers: per layer
    {window (0 = full), inv_freq (tensor), attention_factor}."""
    return _C.load_config(str(path))
