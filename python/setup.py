"""Builds olmo_kernels._C, the torch extension over the engine's CUDA kernels.

    python3 -m pip install --no-build-isolation --no-deps -e python/    # from the repository root
    (or, without pip: python3 python/setup.py build_ext --inplace; export PYTHONPATH=$PWD/python)

No network: plain `pip install -e` builds in an isolated environment and downloads setuptools
into it (and would build against a torch of its choosing); --no-build-isolation builds with the
installed setuptools and torch, the torch that will import the extension, and --no-deps asks
for nothing more.

Sources: olmo_kernels/csrc/ops.cu includes kernels/*.cuh (the engine's kernels, not copies)
and is compiled with the engine's NVCC flags (the Makefile's NVCCFLAGS: -std=c++17, sm_90a,
--expt-relaxed-constexpr, -Isrc -Ikernels); binding.cpp holds the torch side and gets torch's
own C++ flags; engine_config.cpp compiles src/config.cpp and src/common.cpp (config.json and
the RoPE/YaRN frequencies), engine_caps.cu src/device_caps.cu (what the GPU offers the
kernels). Needs nvcc, the torch it builds against and nlohmann-json's header
(/usr/include/nlohmann, as the engine's build); no network.
"""
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
os.chdir(HERE)  # the paths below are relative to python/, wherever this is run from

# The engine's flags, for Hopper (sm_90a) as `make CUDA_ARCHS=90a CUDA_PTX=`. With a -gencode
# here torch adds none of its own, and with -std here it adds no other standard.
NVCC_FLAGS = [
    "-O3", "-lineinfo", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
    # torch defines these for every .cu it builds; the engine does not, so the kernels compile
    # here exactly as in the engine.
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_OPERATORS__",
]

setup(
    name="olmo_kernels",
    version="0.1.0",
    description="olmo.cu's attention, norm and RoPE kernels as PyTorch ops",
    packages=["olmo_kernels"],
    ext_modules=[
        CUDAExtension(
            name="olmo_kernels._C",
            sources=["olmo_kernels/csrc/binding.cpp", "olmo_kernels/csrc/ops.cu",
                     "olmo_kernels/csrc/engine_config.cpp", "olmo_kernels/csrc/engine_caps.cu"],
            include_dirs=[os.path.join(ROOT, "src"), os.path.join(ROOT, "kernels")],
            extra_compile_args={"cxx": ["-O2"], "nvcc": NVCC_FLAGS},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
