"""Imported first by every test module: skips the module, with the reason shown by pytest -rs,
when torch, a CUDA device or the built extension is missing; else gives torch and olmo_kernels."""
import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed: the olmo_kernels tests need PyTorch with CUDA", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the olmo_kernels tests need a GPU (sm_90)", allow_module_level=True)
try:
    import olmo_kernels as ok
except ImportError as e:
    pytest.skip(f"olmo_kernels is not built: {e}", allow_module_level=True)

__all__ = ["torch", "ok", "DTYPES", "TOL", "NAME", "errors", "assert_close", "bshd"]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# rel-L2 and max-abs bars of the engine's own kernel tests (tests/test_attention.cu)
TOL = {torch.float32: (1e-5, 1e-4), torch.float16: (5e-3, 2e-2), torch.bfloat16: (1e-2, 5e-2)}
NAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def errors(got, ref):
    """(rel-L2, max-abs) of got against the float64 reference; NaN counts as infinite."""
    d = got.double() - ref
    d = torch.where(torch.isnan(d), torch.full_like(d, float("inf")), d)
    return (d.norm() / ref.norm().clamp_min(1e-30)).item(), d.abs().max().item() if d.numel() else 0.0


def assert_close(got, ref, dtype, what):
    rel, mx = errors(got, ref)
    rel_tol, abs_tol = TOL[dtype]
    assert rel <= rel_tol and mx <= abs_tol, f"{what}: rel-L2 {rel:.2e} (bar {rel_tol}), max-abs {mx:.2e} (bar {abs_tol})"
    return rel, mx


def bshd(B, S, H, D, dtype, scale=1.0):
    """Random [B, H, S, D] tensor whose memory is [B, S, H, D] (a projection's layout)."""
    return (torch.randn(B, S, H, D, device="cuda", dtype=torch.float32) * scale).to(dtype).transpose(1, 2)
