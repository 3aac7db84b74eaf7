// fuzz_config: config.json text -> parse_config(). An input is either refused with olmo::Error
// or gives a config the engines can use: sizes in range, q/kv widths that did not overflow,
// RoPE frequencies and scales finite and positive (a config that makes them NaN must be
// refused, not run).
#include <cmath>

#include "common.h"
#include "config.h"
#include "fuzz_util.h"
#include "weights.h"

using namespace olmo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    ModelConfig c;
    try {
        c = parse_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
    } catch (const Error&) {
        return 0;
    }
    if (c.hidden < 1 || c.n_layers < 1 || c.vocab < 1 || c.head_dim < 2 || c.q_dim() < 1 || c.kv_dim() < 1 ||
        c.n_heads % c.n_kv_heads != 0 || (int)c.layer_sliding.size() != c.n_layers || !(c.norm_eps > 0))
        __builtin_trap();
    for (const RopeConfig* r : {&c.rope_full, &c.rope_sliding}) {
        if (!(std::isfinite(r->attention_factor) && r->attention_factor > 0)) __builtin_trap();
        for (float f : r->inv_freq(c.head_dim))
            if (!(std::isfinite(f) && f > 0)) __builtin_trap();
    }
    for (Param p : {Param::Embed, Param::Wqkv, Param::Wo, Param::Wgu, Param::Wdown})
        if (param_shape(c, p).numel() <= 0) __builtin_trap();
    return 0;
}
