// engine_config.cpp: the engine's config.json reader and RoPE/YaRN inverse frequencies
// (src/config.cpp, with the helpers it uses from src/common.cpp), compiled into the extension
// as they are: olmo_kernels.rope_inv_freq and load_config call them, so each formula keeps its
// one home in src/.
#include "common.cpp"
#include "config.cpp"
