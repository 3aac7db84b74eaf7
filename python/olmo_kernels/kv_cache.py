"""KVCache: keys and values of a batch of sequences for incremental decoding and beam search,
on olmo_kernels' attention ops.

Storage is one tensor per K and V, [n_layers, batch, capacity, n_kv_heads, head_dim] (capacity
= max_len rounded up to 16), so each layer's cache is read in place by decode_attention and
flash_attention. lengths[b] (host ints) counts the tokens cached for sequence b.

Example (one layer shown; a model calls attend once per layer, then advance once)::

    cache = KVCache(n_layers=1, batch=2, n_kv_heads=8, head_dim=128, max_len=4096)
    out = cache.attend(0, q, k, v)      # prompt: q [2, 32, T, 128], k and v [2, 8, T, 128]
    cache.advance(T)
    out = cache.attend(0, q1, k1, v1)   # one new token per sequence: q1 [2, 32, 1, 128]
    cache.advance(1)
    cache.reorder(torch.tensor([1, 1]))  # beam search: both rows now continue beam 1
"""
import torch


class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.bfloat16, device="cuda"):
        if min(n_layers, batch, n_kv_heads, head_dim, max_len) <= 0:
            raise ValueError("KVCache: n_layers, batch, n_kv_heads, head_dim and max_len must be positive")
        capacity = -(-max_len // 16) * 16
        self.k = torch.zeros(n_layers, batch, capacity, n_kv_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.max_len = max_len
        self.lengths = [0] * batch

    @property
    def batch(self):
        return self.k.shape[1]

    def keys(self, layer):
        """[batch, n_kv_heads, capacity, head_dim] view of a layer's keys (positions past
        lengths[b] hold stale values)."""
        return self.k[layer].transpose(1, 2)

    def values(self, layer):
        return self.v[layer].transpose(1, 2)

    def attend(self, layer, q, k, v, window=None, scale=None, seq=None):
        """Writes k, v [B, n_kv_heads, T, head_dim] after each sequence's cached tokens and returns
        the causal attention of q [B, n_heads, T, head_dim] over the cache, new tokens included
        ([B, n_heads, T, head_dim]). With seq=b, B is 1 and only sequence b is used (a prompt of
        its own length). The lengths move on only with advance(T), after the last layer.
        T * n_heads / n_kv_heads <= 16 runs decode_attention over the whole batch in one launch;
        longer chunks run flash_attention on each sequence's cached prefix."""
        from . import decode_attention, flash_attention

        rows = list(range(self.batch)) if seq is None else [seq]
        self._check(q, k, v, len(rows))
        T = q.shape[2]
        lengths = [self.lengths[b] + T for b in rows]
        if max(lengths) > self.max_len:
            raise ValueError(f"KVCache.attend: {max(lengths)} tokens exceed max_len {self.max_len}")
        sl = slice(None) if seq is None else slice(seq, seq + 1)
        keys, values = self.keys(layer)[sl], self.values(layer)[sl]
        pos = torch.tensor([self.lengths[b] for b in rows], device=q.device)[:, None] + torch.arange(T, device=q.device)
        batch = torch.arange(len(rows), device=q.device)[:, None]
        keys.transpose(1, 2)[batch, pos] = k.transpose(1, 2)
        values.transpose(1, 2)[batch, pos] = v.transpose(1, 2)
        if T * (q.shape[1] // k.shape[1]) <= 16:
            return decode_attention(q, keys, values, lengths, window, scale)
        return torch.cat([flash_attention(q[i:i + 1], keys[i:i + 1, :, :n], values[i:i + 1, :, :n], True, window, scale)
                          for i, n in enumerate(lengths)])

    def advance(self, n=1, seq=None):
        """Counts n more tokens as cached, for every sequence or for sequence seq."""
        for b in range(self.batch) if seq is None else [seq]:
            self.lengths[b] += n

    def reorder(self, beam_idx):
        """Beam search: row b of the cache becomes a copy of row beam_idx[b] (every layer, with
        its length), as transformers' reorder_cache. The batch size may change."""
        idx = torch.as_tensor(beam_idx, device=self.k.device).long()
        if idx.dim() != 1 or (idx.numel() and (idx.min() < 0 or idx.max() >= self.batch)):
            raise ValueError(f"KVCache.reorder: beam_idx must be 1-D with entries in [0, {self.batch})")
        lengths = [self.lengths[i] for i in idx.tolist()]
        self.k = self.k.index_select(1, idx)
        self.v = self.v.index_select(1, idx)
        self.lengths = lengths

    def reset(self):
        self.lengths = [0] * self.batch

    def _check(self, q, k, v, rows):
        _, _, _, nKV, D = self.k.shape
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                raise ValueError(f"KVCache.attend: {name} must be a 4-D tensor [batch, heads, T, head_dim]")
        if k.shape != v.shape or k.shape[0] != rows or k.shape[1] != nKV or k.shape[3] != D:
            raise ValueError(f"KVCache.attend: k and v must be [{rows}, {nKV}, T, {D}], got {tuple(k.shape)} and "
                             f"{tuple(v.shape)}")
        if q.shape[0] != rows or q.shape[2] != k.shape[2] or q.shape[3] != D:
            raise ValueError(f"KVCache.attend: q {tuple(q.shape)} does not match k {tuple(k.shape)}")
        if k.dtype != self.k.dtype or v.dtype != self.k.dtype:
            raise TypeError(f"KVCache.attend: k and v must be {self.k.dtype} (the cache's dtype), got {k.dtype}")
