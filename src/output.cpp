// output.cpp: stop strings, log-probabilities and the output formats (see output.h).
#include "output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common.h"

namespace olmo {

// ---- stop strings ----

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    for (const std::string& s : stops_)
        if (s.empty()) fail("--stop: a stop string is empty");
}

// Invariant: a stop string not found yet can only start inside held_ (any earlier start would
// make a suffix of the text a prefix of that stop string, and held_ is the longest such suffix).
std::string StopMatcher::push(const std::string& piece) {
    if (stopped_) return "";
    held_ += piece;
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    size_t keep = 0;   // the longest tail of held_ that a stop string starts with
    for (const std::string& s : stops_)
        for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; k--)
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
                keep = k;
                break;
            }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopMatcher::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

TextStream::TextStream(const Tokenizer& tok, const std::vector<int>& prompt, std::vector<std::string> stops)
    : decoder_(tok, prompt), stop_(std::move(stops)) {}

std::string TextStream::push(int id) {
    if (stopped()) return "";
    std::string out = stop_.push(decoder_.push(id));
    text_ += out;
    return out;
}

std::string TextStream::finish() {
    std::string out = stop_.push(decoder_.flush());
    out += stop_.flush();
    text_ += out;
    return out;
}

// ---- log-probabilities and token texts ----

TokenScore score_token(const float* logits, int V, int id, int top_n) {
    const double mx = *std::max_element(logits, logits + V);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += std::exp((double)logits[i] - mx);
    const double lse = mx + std::log(sum);
    TokenScore s;
    s.logprob = logits[id] - lse;
    const int n = std::min(top_n, V);
    if (n <= 0) return s;
    std::vector<int> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int k = 0; k < n; k++) s.top.push_back({idx[k], logits[idx[k]] - lse});
    return s;
}

std::string token_text(const Tokenizer& tok, const std::vector<int>& before, int id) {
    std::vector<int> context(before.end() - std::min<size_t>(before.size(), 4), before.end());
    const std::string head = tok.decode(context, /*skip_special=*/false);
    context.push_back(id);
    const std::string both = tok.decode(context, /*skip_special=*/false);
    if (both.compare(0, head.size(), head) == 0) return both.substr(head.size());
    return tok.decode({id}, /*skip_special=*/false);
}

std::string escape_line(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else out += c;
    }
    return out;
}

// ---- JSON ----

namespace {

using ojson = nlohmann::ordered_json;

ojson timings(const SequenceReport& r) {
    ojson t;
    t["prompt_tokens"] = r.prompt_ids.size();
    t["generated_tokens"] = r.ids.size();
    t["first_token_ms"] = r.first_token_ms;
    t["total_ms"] = r.total_ms;
    if (r.ids.size() > 1 && r.total_ms > r.first_token_ms)
        t["decode_tokens_per_s"] = (r.ids.size() - 1) / ((r.total_ms - r.first_token_ms) / 1e3);
    return t;
}

// "tokens" (text of each id) and "top_logprobs" (each step's alternatives, with their text).
void add_token_texts(ojson& j, const SequenceReport& r, const Tokenizer* tok, int top_logprobs) {
    std::vector<int> before = r.prompt_ids;
    ojson tokens = ojson::array(), tops = ojson::array();
    for (size_t i = 0; i < r.ids.size(); i++) {
        if (tok) tokens.push_back(token_text(*tok, before, r.ids[i]));
        if (top_logprobs > 0 && i < r.scores.size()) {
            ojson alts = ojson::array();
            for (const TokenLogprob& a : r.scores[i].top) {
                ojson alt = {{"id", a.id}};
                if (tok) alt["text"] = token_text(*tok, before, a.id);
                alt["logprob"] = a.logprob;
                alts.push_back(alt);
            }
            tops.push_back(alts);
        }
        before.push_back(r.ids[i]);
    }
    if (tok) j["tokens"] = tokens;
    ojson logprobs = ojson::array();
    for (const TokenScore& s : r.scores) logprobs.push_back(s.logprob);
    if (!r.scores.empty()) j["logprobs"] = logprobs;
    if (top_logprobs > 0 && !r.scores.empty()) j["top_logprobs"] = tops;
}

}  // namespace

std::string to_json(const SequenceReport& r, const Tokenizer* tok, int top_logprobs) {
    ojson j;
    j["index"] = r.index;
    if (tok) j["prompt"] = tok->decode(r.prompt_ids);
    j["prompt_ids"] = r.prompt_ids;
    if (tok) j["text"] = r.text;
    j["ids"] = r.ids;
    add_token_texts(j, r, tok, top_logprobs);
    j["finish_reason"] = r.finish_reason;
    if (r.has_beam_score) j["beam_score"] = r.beam_score;
    j["timings"] = timings(r);
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// ---- printing ----

SequencePrinter::SequencePrinter(const OutputOptions& o, const Tokenizer* tok, int vocab,
                                 const std::vector<std::vector<int>>& prompts, bool labels)
    : o_(o), tok_(tok), vocab_(vocab), labels_(labels), seqs_(prompts.size()) {
    for (size_t k = 0; k < prompts.size(); k++) {
        seqs_[k].report.index = k;
        seqs_[k].report.prompt_ids = prompts[k];
        if (tok) seqs_[k].text = std::make_unique<TextStream>(*tok, prompts[k], o.stops);
    }
}

bool SequencePrinter::on_token(const NewToken& t) {
    Sequence& s = seqs_.at(t.req);
    SequenceReport& r = s.report;
    r.ids.push_back(t.id);
    if (t.logits) r.scores.push_back(score_token(t.logits, vocab_, t.id, o_.top_logprobs));
    r.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    if (r.ids.size() == 1) r.first_token_ms = r.total_ms;
    if (s.text) s.text->push(t.id);
    const bool stop = s.text && s.text->stopped();
    if (stop || t.last) finish(s, stop ? "stop" : t.eos ? "eos" : "length");
    return stop;
}

void SequencePrinter::print_beam(size_t k, const BeamResult& b, const std::vector<int>& eos) {
    Sequence& s = seqs_.at(k);
    SequenceReport& r = s.report;
    r.ids = b.tokens;
    for (float lp : b.logprobs) r.scores.push_back({lp, {}});
    r.has_beam_score = true;
    r.beam_score = b.score;
    r.total_ms = r.first_token_ms =   // the tokens of a beam are known when the search ends
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    if (s.text)
        for (int id : b.tokens) s.text->push(id);
    const bool ends_in_eos = !b.tokens.empty() && std::find(eos.begin(), eos.end(), b.tokens.back()) != eos.end();
    finish(s, s.text && s.text->stopped() ? "stop" : ends_in_eos ? "eos" : "length");
}

void SequencePrinter::finish(Sequence& s, const std::string& reason) {
    if (s.done) return;
    s.done = true;
    SequenceReport& r = s.report;
    if (s.text) {
        s.text->finish();
        r.text = s.text->text();
    }
    r.finish_reason = reason;
    std::string line;
    if (o_.json) {
        line = to_json(r, tok_, o_.top_logprobs);
    } else if (o_.ids || !tok_) {
        for (size_t i = 0; i < r.ids.size(); i++) line += (i ? "," : "") + std::to_string(r.ids[i]);
    } else {
        const std::string body = tok_->decode(r.prompt_ids) + r.text;
        line = labels_ ? escape_line(body) : body;
    }
    if (labels_ && !o_.json) line = "[" + std::to_string(r.index) + "] " + line;
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
}

}  // namespace olmo
