// tp_engine.cuh: tensor parallel over several GPUs of one host (--tp N; tensor_parallel.h has the
// split): one CudaEngine per GPU on its shard, each driven by a thread of its own, their partial
// sums added with NCCL all-reduces inside their forward passes (cuda_engine.cu, all_reduce).
// Also what context parallel (cp_engine.cuh) shares with it: the ranks' threads and communicators
// (RankThreads, RankGroup) and the engine over several CudaEngines (MultiGpuEngine).
// Included by cuda_engine.cu only, after the CudaEngine class.
#pragma once

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

namespace olmo {
namespace {

// One thread per GPU: run(f) calls f(rank) on every rank's thread (its device current) at once
// and returns when all have; the first exception is rethrown. Each rank's launches and NCCL
// calls come from its own thread, so the ranks' collectives meet without NCCL groups.
class RankThreads {
public:
    explicit RankThreads(int n) : errors_(n) {
        for (int r = 0; r < n; r++) threads_.emplace_back([this, r] { serve(r); });
    }
    ~RankThreads() {
        {
            std::lock_guard<std::mutex> lock(m_);
            stop_ = true;
        }
        start_.notify_all();
        for (std::thread& t : threads_) t.join();
    }
    void run(const std::function<void(int)>& f) {
        std::unique_lock<std::mutex> lock(m_);
        job_ = &f, pending_ = (int)threads_.size(), generation_++;
        start_.notify_all();
        done_.wait(lock, [&] { return pending_ == 0; });
        for (std::exception_ptr& e : errors_)
            if (e) std::rethrow_exception(std::exchange(e, nullptr));
    }

private:
    void serve(int rank) {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
            start_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            lock.unlock();
            try {
                cudaCheck(cudaSetDevice(rank));
                (*job_)(rank);
            } catch (...) {
                errors_[rank] = std::current_exception();
            }
            lock.lock();
            if (--pending_ == 0) done_.notify_all();
        }
    }
    std::vector<std::thread> threads_;
    std::vector<std::exception_ptr> errors_;
    std::mutex m_;
    std::condition_variable start_, done_;
    const std::function<void(int)>* job_ = nullptr;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
};

// GPUs 0 .. n-1 driven together (TpEngine, CpEngine): a thread each and an NCCL communicator
// each. A rank that fails would leave the others waiting for it in a collective forever: its
// failure aborts every communicator (their waits end in errors), and the group refuses further
// work.
class RankGroup {
public:
    explicit RankGroup(int n) : threads_(n), comms_(n) {
        setenv("NCCL_NVLS_ENABLE", "0", 0);       // no NVLink multicast
        setenv("NCCL_RUNTIME_CONNECT", "0", 0);   // connect at init, not inside a graph capture
        std::vector<int> devices(n);
        std::iota(devices.begin(), devices.end(), 0);
        ncclCheck(ncclCommInitAll(comms_.data(), n, devices.data()));
    }
    ~RankGroup() {
        if (!broken_)
            for (ncclComm_t comm : comms_) ncclCommDestroy(comm);
    }
    int size() const { return (int)comms_.size(); }
    ncclComm_t comm(int r) const { return comms_[r]; }
    // f(r) on every rank at once, each on its thread with its GPU current.
    void on_every_rank(const std::function<void(int)>& f) {
        if (broken_) fail("the multi-GPU engine stopped after an earlier error");
        threads_.run([&](int r) {
            try {
                f(r);
            } catch (...) {
                std::call_once(abort_, [&] {
                    broken_ = true;
                    for (ncclComm_t comm : comms_) ncclCommAbort(comm);
                });
                throw;
            }
        });
    }

private:
    RankThreads threads_;
    std::vector<ncclComm_t> comms_;
    std::once_flag abort_;
    std::atomic<bool> broken_{false};
};

// What TpEngine and CpEngine share: one CudaEngine per GPU 0 .. n-1 (rank r's built by
// make(r, link), link holding its communicator and this engine's block tables), driven by a
// RankGroup. This engine keeps the sequences' block tables (every rank's pools have the same
// blocks) and runs every prompt in the same chunks on every rank (their collectives meet).
template <typename T, typename G>
class MultiGpuEngine : public Engine {
public:
    using Rank = CudaEngine<T, G>;
    using MakeRank = std::function<std::unique_ptr<Rank>(int r, TpRank link)>;

    const ModelConfig& config() const override { return c_; }
    int max_batch() const override { return ranks_[0]->max_batch(); }
    void warm_up(const WarmUp& w) override {
        rehearse(w);
        group_.on_every_rank([&](int r) { ranks_[r]->warm_products(w); });
    }
    MemoryUse memory() const override {
        MemoryUse m;
        for (const auto& e : ranks_) {
            const MemoryUse u = e->memory();
            m.weights += u.weights, m.kv_pool += u.kv_pool, m.other += u.other;
        }
        m.weight_format = ranks_[0]->memory().weight_format + how_;
        m.kv_format = ranks_[0]->memory().kv_format;
        return with_pool_use(m);
    }

protected:
    // how: the weights' placement, for --stats (", split over 2 GPUs (tensor parallel)").
    MultiGpuEngine(const ModelConfig& c, int n, int max_seq, int kv_blocks, const std::string& how, const MakeRank& make)
        : c_(c), group_(n), ranks_(n), how_(how) {
        init_kv(c, max_seq, kv_blocks);
        group_.on_every_rank([&](int r) {
            TpRank link;
            link.comm = group_.comm(r), link.kv = kv_.get();
            ranks_[r] = make(r, link);
        });
        int chunk = INT32_MAX;
        for (auto& e : ranks_) chunk = std::min(chunk, e->chunk_);
        for (auto& e : ranks_) e->chunk_ = chunk;
    }
    void copy_block(int kind, int src, int dst) override {
        group_.on_every_rank([&](int r) { ranks_[r]->copy_block(kind, src, dst); });
    }

    ModelConfig c_;
    RankGroup group_;
    std::vector<std::unique_ptr<Rank>> ranks_;   // (destroyed before the group's communicators)
    std::string how_;
};

// Tensor parallel over GPUs 0 .. n-1 (tensor_parallel.h): one CudaEngine per GPU on its shard,
// driven in step. Each call goes to every rank at once, and this engine returns rank 0's logits
// or ids. The ranks add their partial sums with NCCL all-reduces inside their forward passes
// (captured in their decode graphs too).
template <typename T, typename G>
class TpEngine : public MultiGpuEngine<T, G> {
    using Base = MultiGpuEngine<T, G>;
    using Base::ranks_;

public:
    TpEngine(const ModelConfig& c, const Checkpoint* ck, int max_seq, int kv_blocks, int max_batch, bool fp8,
             LoadProgress* progress, int max_chunk, int n, bool kv_fp8)
        : Base(c, n, max_seq, kv_blocks, ", split over " + std::to_string(n) + " GPUs (tensor parallel)",
               [&](int r, TpRank tp) {
                   tp.rank = r, tp.ranks = n, tp.full = c;
                   return std::make_unique<CudaEngine<T, G>>(tp_shard_config(c, n), ck, max_seq, kv_blocks, max_batch,
                                                             fp8, r == 0 ? progress : nullptr, max_chunk, tp, kv_fp8);
               }) {}

protected:
    void prefill_impl(int seq, const std::vector<int>& ids, float* logits, int* id, const SamplingParams& s,
                      uint64_t step) override {
        on_every_rank([&](int r) { ranks_[r]->prefill_impl(seq, ids, r ? nullptr : logits, r ? nullptr : id, s, step); });
    }
    void decode_impl(const std::vector<int>& seqs, const std::vector<int>& ids, float* logits, int* ids_out,
                     const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps) override {
        on_every_rank([&](int r) { ranks_[r]->decode_impl(seqs, ids, r ? nullptr : logits, r ? nullptr : ids_out, s, steps); });
    }
    void score_impl(int seq, const std::vector<int>& ids, float* logprobs) override {
        on_every_rank([&](int r) { ranks_[r]->score_impl(seq, ids, r ? nullptr : logprobs); });
    }

private:
    void on_every_rank(const std::function<void(int)>& f) { this->group_.on_every_rank(f); }
};

}  // namespace
}  // namespace olmo
