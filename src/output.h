// output.h: what ./generate prints of a generated sequence: its text cut before a stop string
// (StopMatcher, TextStream), each token's log-probability, and the finished sequence as a JSON
// object (--json, one per line: JSON Lines) or as a plain line of a batch.
//
// Formats (README.md, "Output"):
//   plain batch line:  "[k] " + prompt text + continuation, with '\' written as "\\", a newline
//                      as "\n" and a carriage return as "\r", so each sequence is exactly one
//                      line; k is the prompt's index, lines come in the order sequences finish.
//   --json:            {"index", "prompt", "prompt_ids", "text", "ids", "tokens", "logprobs",
//                       ["top_logprobs"], "finish_reason", "timings", ["beam_score"]} on one line.
// Log-probabilities are log_softmax of the model's raw logits at the step that produced the
// token (what transformers' compute_transition_scores(sequences, output.logits,
// normalize_logits=True) gives), before the repetition penalty, temperature or any warper.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "decoding.h"
#include "tokenizer.h"

namespace olmo {

// Finds the first of several stop strings in text that arrives in pieces, even when a stop
// string is split across pieces. push() returns the text that can no longer be the start of a
// stop string, so it is safe to show; the rest is held back until the next piece decides it.
// Once a stop string is complete, the text before it has been returned and nothing more is.
class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);   // an empty stop string is an error
    std::string push(const std::string& piece);
    std::string flush();   // at the end: the text held back (empty once stopped)
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;     // text not returned yet: a possible start of a stop string
    bool stopped_ = false;
};

// The continuation of a prompt as tokens arrive: UTF-8-safe streaming (StreamDecoder) through a
// StopMatcher. push() returns the new text that is safe to show; text() is all shown so far.
class TextStream {
public:
    TextStream(const Tokenizer& tok, const std::vector<int>& prompt, std::vector<std::string> stops);
    std::string push(int id);   // special tokens (eos) add no text
    std::string finish();       // the rest at the end
    bool stopped() const { return stop_.stopped(); }
    const std::string& text() const { return text_; }

private:
    StreamDecoder decoder_;
    StopMatcher stop_;
    std::string text_;
};

// log_softmax(logits [V]) at `id` and the top_n most likely ids (ties: lower id first), in double.
struct TokenLogprob {
    int id;
    double logprob;
};
struct TokenScore {
    double logprob = 0;
    std::vector<TokenLogprob> top;
};
TokenScore score_token(const float* logits, int V, int id, int top_n);

// The bytes `id` adds after the ids `before` (its last few are used), special tokens written out.
std::string token_text(const Tokenizer& tok, const std::vector<int>& before, int id);

// Text as one line: '\' -> "\\", newline -> "\n", carriage return -> "\r".
std::string escape_line(const std::string& text);

// One finished sequence, as --json reports it.
struct SequenceReport {
    size_t index = 0;
    std::vector<int> prompt_ids, ids;
    std::vector<TokenScore> scores;   // one per id, or none
    std::string text;                 // the continuation, cut before a stop string
    std::string finish_reason;        // "stop", "eos" or "length"
    double first_token_ms = 0, total_ms = 0;
    bool has_beam_score = false;
    double beam_score = 0;
};
// The JSON object on one line (no newline). tok may be null: then no text fields. Invalid UTF-8
// (a token that ends inside a character) is written as U+FFFD.
std::string to_json(const SequenceReport& r, const Tokenizer* tok, int top_logprobs);

// What the printer shows and how.
struct OutputOptions {
    bool json = false;                // --json
    bool ids = false;                 // --output-ids
    int top_logprobs = 0;             // --logprobs N
    std::vector<std::string> stops;   // --stop
};

// Prints each sequence of a batch the moment it ends: a JSON line, or "[k] " and its ids or its
// escaped text (`labels` false: no "[k] " and no escaping, for a single sequence). Holds one
// TextStream per sequence for the stop strings.
class SequencePrinter {
public:
    SequencePrinter(const OutputOptions& o, const Tokenizer* tok, int vocab, const std::vector<std::vector<int>>& prompts,
                    bool labels);
    // generate()'s callback: true when a stop string ends the sequence here.
    bool on_token(const NewToken& t);
    // A beam search result for prompt k: the best hypothesis, cut at a stop string afterwards.
    void print_beam(size_t k, const BeamResult& r, const std::vector<int>& eos);

private:
    struct Sequence {
        std::unique_ptr<TextStream> text;   // null without a tokenizer
        SequenceReport report;
        bool done = false;
    };
    void finish(Sequence& s, const std::string& reason);

    OutputOptions o_;
    const Tokenizer* tok_;
    int vocab_;
    bool labels_;
    std::vector<Sequence> seqs_;
    std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace olmo
