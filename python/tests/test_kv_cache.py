"""KVCache: incremental decoding (a prompt, then token by token, then a 2-token step) equals full
causal attention over the whole sequence; sequences of different lengths decode together; a
sliding window through the cache; beam reorder equals indexing the cache."""
from gpu_env import NAME, assert_close, bshd, ok, torch  # skips without torch/CUDA/build

import pytest

import error_report
from reference import ref_attention, ref_decode


def KVCacheFor(q, k, max_len, n_layers=1):
    """A cache shaped for q [B, nH, S, D] and k [B, nKV, S, D]."""
    return ok.KVCache(n_layers, q.shape[0], k.shape[1], k.shape[3], max_len, dtype=k.dtype)


def run_incremental(cache, q, k, v, steps, window=None):
    """Feeds q, k, v [B, H, S, D] through layer 0 of the cache in chunks of `steps` tokens;
    returns the outputs concatenated along the sequence."""
    outs, t = [], 0
    for n in steps:
        sl = slice(t, t + n)
        outs.append(cache.attend(0, q[:, :, sl], k[:, :, sl], v[:, :, sl], window=window))
        cache.advance(n)
        t += n
    return torch.cat(outs, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=NAME.get)
@pytest.mark.parametrize("window", [None, 20])
def test_incremental_equals_full_attention(dtype, window):
    torch.manual_seed(0)
    B, nH, nKV, D, S = 3, 8, 2, 128, 83
    q, k, v = bshd(B, S, nH, D, dtype), bshd(B, S, nKV, D, dtype), bshd(B, S, nKV, D, dtype)
    cache = KVCacheFor(q, k, max_len=100)
    steps = [50] + [1] * 31 + [2]  # prompt (flash path), decode steps (decode kernel), a 2-token step
    got = run_incremental(cache, q, k, v, steps, window)
    assert cache.lengths == [S] * B
    ref = ref_attention(q, k, v, True, window or 0)
    ours = assert_close(got, ref, dtype, "incremental")
    full = ok.flash_attention(q, k, v, window=window)
    assert_close(full, ref, dtype, "full")
    error_report.add("kv cache", f"prompt 50 + 33 steps, window {window}", NAME[dtype], ours)


def test_sequences_of_different_lengths_decode_together():
    torch.manual_seed(1)
    dtype, nH, nKV, D = torch.bfloat16, 4, 1, 64
    prompts, steps = [10, 37, 1], 5
    q, k, v = bshd(3, 37 + steps, nH, D, dtype), bshd(3, 37 + steps, nKV, D, dtype), bshd(3, 37 + steps, nKV, D, dtype)
    cache = KVCacheFor(q, k, max_len=64)
    for b, n in enumerate(prompts):  # each prompt alone, at its own length
        cache.attend(0, q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n], seq=b)
        cache.advance(n, seq=b)
    assert cache.lengths == prompts
    for s in range(steps):  # then one batched step per token, each sequence at its own position
        pos = [n + s for n in prompts]
        qs = torch.stack([q[b, :, p] for b, p in enumerate(pos)])[:, :, None]
        ks = torch.stack([k[b, :, p] for b, p in enumerate(pos)])[:, :, None]
        vs = torch.stack([v[b, :, p] for b, p in enumerate(pos)])[:, :, None]
        out = cache.attend(0, qs, ks, vs)
        cache.advance(1)
        for b, p in enumerate(pos):
            ref = ref_attention(q[b:b + 1, :, p:p + 1], k[b:b + 1, :, :p + 1], v[b:b + 1, :, :p + 1])
            assert_close(out[b:b + 1], ref, dtype, f"step {s}, sequence {b}")


def test_reorder_equals_indexing_the_cache():
    torch.manual_seed(2)
    dtype, nH, nKV, D, S = torch.bfloat16, 8, 2, 64, 30
    q, k, v = bshd(3, S + 1, nH, D, dtype), bshd(3, S + 1, nKV, D, dtype), bshd(3, S + 1, nKV, D, dtype)
    cache = KVCacheFor(q, k, max_len=40, n_layers=2)
    for layer in range(2):
        cache.attend(layer, q[:, :, :S], k[:, :, :S], v[:, :, :S])
    cache.advance(S)
    k_before, v_before = cache.k.clone(), cache.v.clone()
    beam_idx = torch.tensor([2, 0, 0], device="cuda")
    cache.reorder(beam_idx)
    assert torch.equal(cache.k, k_before[:, beam_idx]) and torch.equal(cache.v, v_before[:, beam_idx])
    assert cache.lengths == [S] * 3
    # the next step on the reordered cache sees the chosen beams' keys
    new = slice(S, S + 1)
    out = cache.attend(1, q[:, :, new], k[:, :, new], v[:, :, new])
    keys = torch.cat([k[beam_idx, :, :S], k[:, :, new]], 2)
    values = torch.cat([v[beam_idx, :, :S], v[:, :, new]], 2)
    assert_close(out, ref_decode(q[:, :, new], keys, values, [S + 1] * 3), dtype, "after reorder")


def test_reorder_may_change_the_batch_and_lengths():
    cache = ok.KVCache(1, 2, 1, 8, 16, dtype=torch.float32)
    cache.lengths = [3, 5]
    cache.reorder([1, 1, 0, 1])
    assert cache.batch == 4 and cache.lengths == [5, 5, 3, 5]


def test_cache_errors():
    cache = ok.KVCache(1, 1, 2, 64, 8)
    q, k = torch.randn(1, 4, 9, 64, device="cuda").bfloat16(), torch.randn(1, 2, 9, 64, device="cuda").bfloat16()
    with pytest.raises(ValueError, match="exceed max_len 8"):
        cache.attend(0, q, k, k)
    with pytest.raises(TypeError, match="cache's dtype"):
        cache.attend(0, q[:, :, :2].float(), k[:, :, :2].float(), k[:, :, :2].float())
    with pytest.raises(ValueError, match="must be"):
        cache.attend(0, q[:, :, :2], k[:, :1, :2], k[:, :1, :2])
    with pytest.raises(ValueError, match="beam_idx"):
        cache.reorder([1])
