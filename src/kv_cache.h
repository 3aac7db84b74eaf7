// kv_cache.h: the bookkeeping of the paged KV cache (vLLM's PagedAttention layout), shared by
// the CPU and the CUDA engine. It owns no tensors, only block numbers.
//
// Keys and values live in pools of fixed-size blocks (block_size tokens each); every layer has
// its own pool tensor [num_blocks * block_size, nKV*hd] but all layers of one kind use the same
// block numbers, so one block table per sequence and kind says where a token's K/V rows are:
//     row(seq, pos) = table[pos / block_size] * block_size + pos % block_size
// Two kinds: full-attention layers keep every position; sliding-window layers (OLMo-3) only
// need the last W positions, so their blocks are returned to the pool as they fall out of the
// window and are reused. Blocks are reference counted: fork() gives a new sequence (a beam) the
// parent's blocks without copying; the first write into a shared block copies it (copy on
// write), which reserve() reports so the engine can copy the rows. free() returns blocks.
#pragma once
#include <array>
#include <vector>

namespace olmo {

class KvCache {
public:
    enum Kind { kFull = 0, kSliding = 1 };

    // num_blocks[kind] blocks of block_size tokens for each kind (0 when the model has no layer
    // of that kind); window = the sliding window W (0 = none).
    KvCache(std::array<int, 2> num_blocks, int block_size, int window);

    int new_sequence();
    int fork(int parent);            // a new sequence sharing all of parent's blocks
    void free(int seq);              // its blocks go back to the pool (when no one else holds them)
                                     // and come out again in the order they had
    void clear();                    // frees every sequence
    int len(int seq) const { return seqs_.at(seq).len; }
    bool alive(int seq) const { return seq >= 0 && seq < (int)seqs_.size() && seqs_[seq].alive; }

    // A block the engine must copy (all layers of that kind) before writing into dst.
    struct Copy {
        int kind, src, dst;
    };
    // Makes room to append n tokens to seq: allocates blocks and un-shares the block the first
    // new token goes into. Throws olmo::Error (pool exhausted) and changes nothing if it cannot.
    std::vector<Copy> reserve(int seq, int n);
    // Blocks of `kind` that reserve(seq, n) would take from the pool.
    int blocks_to_reserve(int seq, int n, int kind) const;
    // Records that n tokens were appended; sliding blocks wholly out of the window are released.
    void commit(int seq, int n);

    // Pool row of the K/V of token `pos` of `seq` for layers of `kind`.
    int row(int seq, int kind, int pos) const;
    // The block table of seq for kind (entries of released sliding blocks are -1).
    const std::vector<int>& table(int seq, int kind) const { return seqs_.at(seq).blocks[kind]; }

    int block_size() const { return block_size_; }
    int total_blocks(int kind) const { return (int)refs_[kind].size(); }
    int free_blocks(int kind) const { return (int)free_[kind].size(); }
    // Blocks a sequence of `tokens` tokens needs at most, in a pool of either kind.
    int blocks_needed(int tokens) const { return (tokens + block_size_ - 1) / block_size_; }

private:
    struct Seq {
        int len = 0;
        bool alive = false;
        std::array<std::vector<int>, 2> blocks;
    };
    int alloc(int kind);
    void release(int kind, int block);

    int block_size_, window_;
    std::array<std::vector<int>, 2> refs_;   // reference count per block
    std::array<std::vector<int>, 2> free_;   // free block numbers (a stack)
    std::vector<Seq> seqs_;
};

}  // namespace olmo
