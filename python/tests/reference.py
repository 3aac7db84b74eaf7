"""float64 reference attention for the tests (the math of docs/architecture.md)."""
import torch


def visible(Sq, Sk, causal, window, device="cuda"):
    """[Sq, Sk] mask: the queries are the last Sq of Sk positions."""
    i = torch.arange(Sq, device=device)[:, None] + (Sk - Sq)
    j = torch.arange(Sk, device=device)[None, :]
    m = j <= i if causal else torch.ones(Sq, Sk, dtype=torch.bool, device=device)
    return m & (j > i - window) if window else m


def ref_attention(q, k, v, causal=True, window=0, scale=None):
    """float64 softmax(q·kᵀ·scale + mask)·v, q [B, nH, Sq, D], k and v [B, nKV, Sk, D]."""
    g = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    s = s.masked_fill(~visible(q.shape[2], k.shape[2], causal, window), float("-inf"))
    return s.softmax(-1) @ v


def ref_decode(q, k, v, lengths, window=0):
    """Each sequence's T queries at its last T positions of lengths[b] keys."""
    return torch.cat([ref_attention(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], True, window)
                      for b, n in enumerate(lengths)])
