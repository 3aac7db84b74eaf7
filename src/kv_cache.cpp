// kv_cache.cpp: block pools, block tables, forks and copy on write (see kv_cache.h).
#include "kv_cache.h"

#include <algorithm>
#include <string>

#include "common.h"

namespace olmo {

KvCache::KvCache(std::array<int, 2> num_blocks, int block_size, int window) : block_size_(block_size), window_(window) {
    if (block_size <= 0) fail("KV cache: block size must be positive");
    for (int k = 0; k < 2; k++) {
        refs_[k].assign(num_blocks[k], 0);
        for (int b = num_blocks[k] - 1; b >= 0; b--) free_[k].push_back(b);   // block 0 on top
    }
}

int KvCache::alloc(int kind) {
    int b = free_[kind].back();
    free_[kind].pop_back();
    refs_[kind][b] = 1;
    return b;
}

void KvCache::release(int kind, int block) {
    if (block >= 0 && --refs_[kind][block] == 0) free_[kind].push_back(block);
}

int KvCache::new_sequence() {
    for (int s = 0; s < (int)seqs_.size(); s++)
        if (!seqs_[s].alive) {
            seqs_[s] = Seq{};
            seqs_[s].alive = true;
            return s;
        }
    seqs_.push_back(Seq{});
    seqs_.back().alive = true;
    return (int)seqs_.size() - 1;
}

int KvCache::fork(int parent) {
    if (!alive(parent)) fail("KV cache: fork of a sequence that does not exist");
    int s = new_sequence();
    seqs_[s] = seqs_[parent];
    for (int k = 0; k < 2; k++)
        for (int b : seqs_[s].blocks[k])
            if (b >= 0) refs_[k][b]++;
    return s;
}

void KvCache::free(int seq) {
    if (!alive(seq)) return;
    // Last block first, so that the first ends on top of the stack: the next sequence gets the
    // blocks back in counting order, and the Hopper prefill copies such runs a whole tile at a time.
    for (int k = 0; k < 2; k++)
        for (auto b = seqs_[seq].blocks[k].rbegin(); b != seqs_[seq].blocks[k].rend(); ++b) release(k, *b);
    seqs_[seq] = Seq{};
}

void KvCache::clear() {
    for (int s = 0; s < (int)seqs_.size(); s++) free(s);
}

int KvCache::blocks_to_reserve(int seq, int n, int kind) const {
    if (refs_[kind].empty()) return 0;
    const Seq& s = seqs_.at(seq);
    const std::vector<int>& t = s.blocks[kind];
    const int first = s.len / block_size_, last = (s.len + n - 1) / block_size_;   // logical blocks written
    const bool shared = first < (int)t.size() && t[first] >= 0 && refs_[kind][t[first]] > 1;   // copied on write
    return std::max(0, last + 1 - (int)t.size()) + (shared ? 1 : 0);
}

std::vector<KvCache::Copy> KvCache::reserve(int seq, int n) {
    if (!alive(seq)) fail("KV cache: sequence " + std::to_string(seq) + " does not exist");
    Seq& s = seqs_[seq];
    const int first = s.len / block_size_, last = (s.len + n - 1) / block_size_;   // logical blocks written
    // Count first, so that a failure leaves everything as it was.
    for (int k = 0; k < 2; k++) {
        const int need = blocks_to_reserve(seq, n, k);
        if (need > (int)free_[k].size())
            fail("KV cache pool exhausted: " + std::to_string(need) + " more blocks of " + std::to_string(block_size_) +
                 " tokens needed, " + std::to_string(free_[k].size()) + " free of " + std::to_string(refs_[k].size()) +
                 " (raise --kv-pool-gb or run fewer sequences at once)");
    }
    std::vector<Copy> copies;
    for (int k = 0; k < 2; k++) {
        if (refs_[k].empty()) continue;
        std::vector<int>& t = s.blocks[k];
        if (first < (int)t.size() && t[first] >= 0 && refs_[k][t[first]] > 1) {   // shared: copy on write
            int fresh = alloc(k);
            copies.push_back({k, t[first], fresh});
            release(k, t[first]);
            t[first] = fresh;
        }
        while ((int)t.size() <= last) t.push_back(alloc(k));
    }
    return copies;
}

void KvCache::commit(int seq, int n) {
    Seq& s = seqs_.at(seq);
    s.len += n;
    if (window_ <= 0 || refs_[kSliding].empty()) return;
    // Keys before len - W + 1 are never read again: release the blocks that hold only those.
    const int first_needed = s.len - window_ + 1;
    std::vector<int>& t = s.blocks[kSliding];
    for (int j = 0; j < (int)t.size() && (j + 1) * block_size_ <= first_needed; j++) {
        release(kSliding, t[j]);
        t[j] = -1;
    }
}

int KvCache::row(int seq, int kind, int pos) const {
    const std::vector<int>& t = seqs_.at(seq).blocks[kind];
    const int b = t.at(pos / block_size_);
    if (b < 0) fail("KV cache: position " + std::to_string(pos) + " was released (outside the sliding window)");
    return b * block_size_ + pos % block_size_;
}

}  // namespace olmo
