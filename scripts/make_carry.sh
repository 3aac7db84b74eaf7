#!/usr/bin/env bash
# Fills the ignored folder .carry/ with what the GPU machine needs and cannot download:
# .carry/sys, the libutf8proc Debian packages unpacked (for every build there), and
# .carry/corpus.txt.xz, the shared corpus (for training the default model only: carry it alone,
# the working tree plus carried paths must stay under 64 MiB), and .carry/llama/llama-trim.tar.xz,
# llama.cpp's source without the backends, tests and examples a CUDA build of llama-completion
# does not need (4 MB instead of 6.6: the tree is ~61 MB), for scripts/bench_real.sh.
set -e
cd "$(dirname "$0")/.."
mkdir -p .carry/sys
cp ../shared/corpus/corpus.txt.xz .carry/
tmp=$(mktemp -d); (cd "$tmp" && apt-get download libutf8proc-dev libutf8proc2 >/dev/null)
for f in "$tmp"/*.deb; do dpkg -x "$f" .carry/sys; done
rm -rf .carry/sys/usr/share .carry/sys/usr/lib/x86_64-linux-gnu/libutf8proc.a   # the build links the .so
rm -rf "$tmp/ll" && mkdir -p "$tmp/ll" .carry/llama && tar xJf ../shared/llamacpp/llama.cpp-src.tar.xz -C "$tmp/ll"
(cd "$tmp/ll/ggml/src" && rm -rf ggml-virtgpu ggml-cann ggml-openvino ggml-webgpu ggml-metal ggml-et ggml-hexagon \
  ggml-sycl ggml-vulkan ggml-opencl ggml-zdnn ggml-musa ggml-rpc ggml-blas)
rm -rf "$tmp/ll/tests" "$tmp/ll/examples" "$tmp/ll/docs"
# of the tools, llama-completion alone
find "$tmp/ll/tools" -mindepth 1 -maxdepth 1 ! -name completion ! -name CMakeLists.txt -exec rm -rf {} +
printf 'llama_add_compile_flags()\nadd_subdirectory(completion)\n' >"$tmp/ll/tools/CMakeLists.txt"
tar cJf .carry/llama/llama-trim.tar.xz -C "$tmp/ll" . && rm -rf "$tmp"
