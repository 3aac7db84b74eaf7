// test_output.cpp: what ./generate prints (output.h): stop strings found across any split of the
// text, held back only while they could still begin; the UTF-8-safe text stream cut before a stop
// string on a real tokenizer; token log-probabilities equal to log-softmax of the golden logits;
// the JSON object and the escaped batch line; and tests/run_all.sh's summary of `make test`.
#include <sys/stat.h>

#include <cmath>
#include <sstream>

#include "golden.h"
#include "output.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

// Feeds pieces to a StopMatcher; the text it lets out, and whether it stopped.
std::pair<std::string, bool> run_matcher(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
    StopMatcher m(stops);
    std::string out;
    for (const std::string& p : pieces) out += m.push(p);
    out += m.flush();
    return {out, m.stopped()};
}

TEST(StopMatcher, StopSplitAcrossPieces) {
    StopMatcher m({"</s>"});
    EXPECT_EQ(m.push("Hello <"), "Hello ");   // "<" could begin "</s>": held back
    EXPECT_EQ(m.push("/"), "");
    EXPECT_EQ(m.push("s"), "");
    EXPECT_FALSE(m.stopped());
    EXPECT_EQ(m.push("> and more"), "");
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.push("later"), "");
    EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HeldTextIsReleasedOnceItCannotMatch) {
    StopMatcher m({"abc"});
    EXPECT_EQ(m.push("xab"), "x");
    EXPECT_EQ(m.push("d"), "abd");
    EXPECT_EQ(m.push("a"), "");
    EXPECT_EQ(m.flush(), "a");   // the end: nothing more can complete it
    EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, FirstOccurrenceOfAnyStopWins) {
    EXPECT_EQ(run_matcher({"aab"}, {"aaa", "b"}), std::make_pair(std::string("a"), true));   // overlapping prefix
    EXPECT_EQ(run_matcher({"cd", "bcde"}, {"abcde"}), std::make_pair(std::string("a"), true));
    EXPECT_EQ(run_matcher({"x"}, {"x"}), std::make_pair(std::string(""), true));
    EXPECT_EQ(run_matcher({"\xE4\xB8\x96\xE7\x95\x8C"}, {"hello \xE4\xB8\x96", "\xE7\x95\x8C!"}),   // "世界"
              std::make_pair(std::string("hello "), true));
    EXPECT_EQ(run_matcher({"zz"}, {"no ", "stop z"}), std::make_pair(std::string("no stop z"), false));
    expect_error([] { StopMatcher({"ok", ""}); }, {"--stop", "empty"});
}

// Every way to cut the text into three pieces gives the same result, and what has been let out
// is never more than the text before the stop string.
TEST(StopMatcher, EverySplitGivesTheSameText) {
    const std::string text = "one two\nthree\n\nSTOP four STOP";
    const std::vector<std::string> stops = {"STOP", "\n\n", "three!"};
    const std::string want = "one two\nthree";
    for (size_t i = 0; i <= text.size(); i++)
        for (size_t j = i; j <= text.size(); j++) {
            StopMatcher m(stops);
            std::string out;
            for (const std::string& piece : {text.substr(0, i), text.substr(i, j - i), text.substr(j)}) {
                out += m.push(piece);
                ASSERT_EQ(want.compare(0, out.size(), out), 0) << "let out too much at split " << i << "," << j;
            }
            out += m.flush();
            EXPECT_EQ(out, want) << "split " << i << "," << j;
            EXPECT_TRUE(m.stopped());
        }
}

// On the default model's sentencepiece tokenizer: a stop string that spans several tokens cuts
// the text before it; the stream stops at the token that completes it, and text is let out as
// soon as it can no longer begin the stop string.
TEST(TextStream, StopSpanningTokensOnARealTokenizer) {
    auto tok = load_tokenizer("tokenizer/tokenizer.model");
    const std::vector<int> prompt = tok->encode("Once upon a time");
    const std::string continuation = ", there was a little girl named Lily. She loved to play.";
    const std::vector<int> ids = tok->encode(continuation);
    const std::string stop = "ed to pl";   // inside " loved", " to", " play"
    TextStream ts(*tok, prompt, {stop});
    std::string shown;
    size_t stopped_at = ids.size();
    for (size_t i = 0; i < ids.size() && !ts.stopped(); i++) {
        shown += ts.push(ids[i]);
        if (ts.stopped()) stopped_at = i;
        std::vector<int> so_far = prompt;
        so_far.insert(so_far.end(), ids.begin(), ids.begin() + i + 1);
        const std::string decoded = tok->decode(so_far).substr(tok->decode(prompt).size());
        if (!ts.stopped()) {   // everything decoded so far is shown, but for a possible start of the stop
            EXPECT_EQ(decoded.compare(0, shown.size(), shown), 0);
            const std::string held = decoded.substr(shown.size());
            EXPECT_LT(held.size(), stop.size());
            EXPECT_EQ(stop.compare(0, held.size(), held), 0) << "held back \"" << held << "\"";
        } else {
            EXPECT_NE(decoded.find(stop), std::string::npos);
        }
    }
    shown += ts.finish();
    EXPECT_TRUE(ts.stopped());
    std::vector<int> all = prompt;
    all.insert(all.end(), ids.begin(), ids.end());
    const std::string full = tok->decode(all).substr(tok->decode(prompt).size());
    ASSERT_NE(full.find(stop), std::string::npos);
    EXPECT_EQ(shown, full.substr(0, full.find(stop)));
    EXPECT_EQ(shown.substr(shown.size() - 13), "Lily. She lov");
    EXPECT_EQ(ts.text(), shown);
    EXPECT_LT(stopped_at + 1, ids.size());
}

TEST(Logprobs, EqualLogSoftmaxOfGoldenLogits) {
    for (const std::string& name : {std::string("olmo2_gqa"), std::string("olmo1_clip_tied")}) {
        const std::vector<float> l = last_prompt_logits(Fixture(name).golden);
        const int V = (int)l.size();
        double mx = *std::max_element(l.begin(), l.end()), sum = 0;
        for (float x : l) sum += std::exp(x - mx);
        auto log_softmax = [&](int i) { return l[i] - mx - std::log(sum); };
        for (int id : {0, 7, V - 1}) EXPECT_NEAR(score_token(l.data(), V, id, 0).logprob, log_softmax(id), 1e-9) << name;
        const TokenScore s = score_token(l.data(), V, 3, 5);
        ASSERT_EQ(s.top.size(), 5u);
        EXPECT_EQ(s.top[0].id, std::max_element(l.begin(), l.end()) - l.begin());
        for (size_t k = 0; k < 5; k++) {
            EXPECT_NEAR(s.top[k].logprob, log_softmax(s.top[k].id), 1e-9);
            if (k) {
                EXPECT_GE(s.top[k - 1].logprob, s.top[k].logprob);
            }
        }
        int above = 0;   // nothing outside the top 5 is more likely than the 5th
        for (int i = 0; i < V; i++) above += l[i] > l[s.top[4].id];
        EXPECT_EQ(above, 4);
    }
}

TEST(Output, EscapedLineIsOneLineAndRoundTrips) {
    const std::string text = "a\\b\nc\r\nd\\n";
    const std::string line = escape_line(text);
    EXPECT_EQ(line, "a\\\\b\\nc\\r\\nd\\\\n");
    std::string back;   // the reader's side: \\ -> \, \n -> newline, \r -> carriage return
    for (size_t i = 0; i < line.size(); i++) {
        if (line[i] != '\\') { back += line[i]; continue; }
        const char c = line[++i];
        back += c == 'n' ? '\n' : c == 'r' ? '\r' : c;
    }
    EXPECT_EQ(back, text);
}

TEST(Output, JsonObjectParses) {
    auto tok = load_tokenizer("tokenizer/tokenizer.model");
    SequenceReport r;
    r.index = 3;
    r.prompt_ids = tok->encode("Say \"hi\"");
    r.ids = tok->encode(" then\nbye");
    r.text = " then\nbye \xff";   // a token may end inside a character: written as U+FFFD
    for (size_t i = 0; i < r.ids.size(); i++) r.scores.push_back({-0.5 * i, {{r.ids[i], -0.5 * i}, {7, -3.0}}});
    r.finish_reason = "stop";
    r.first_token_ms = 2, r.total_ms = 10;
    const std::string line = to_json(r, tok.get(), 2);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    const json j = json::parse(line);
    EXPECT_EQ(j["index"], 3);
    EXPECT_EQ(j["prompt"], "Say \"hi\"");
    EXPECT_EQ(j["text"], " then\nbye \xEF\xBF\xBD");
    EXPECT_EQ(j["ids"].get<std::vector<int>>(), r.ids);
    EXPECT_EQ(j["prompt_ids"].get<std::vector<int>>(), r.prompt_ids);
    ASSERT_EQ(j["tokens"].size(), r.ids.size());
    std::string joined;
    for (const auto& t : j["tokens"]) joined += t.get<std::string>();
    std::vector<int> all = r.prompt_ids;
    all.insert(all.end(), r.ids.begin(), r.ids.end());
    EXPECT_EQ(joined, tok->decode(all).substr(tok->decode(r.prompt_ids).size()));
    EXPECT_EQ(j["logprobs"][1], -0.5);
    EXPECT_EQ(j["top_logprobs"][1][1]["id"], 7);
    EXPECT_EQ(j["top_logprobs"][1][0]["text"], j["tokens"][1]);
    EXPECT_EQ(j["finish_reason"], "stop");
    EXPECT_EQ(j["timings"]["generated_tokens"], r.ids.size());
    EXPECT_FALSE(j.contains("beam_score"));
    EXPECT_FALSE(json::parse(to_json(r, nullptr, 0)).contains("text"));   // no tokenizer: ids only
}

// tests/run_all.sh on two fake GoogleTest binaries: one line per binary with its counts, each
// skip reason once, a failed test's output, full logs in <build>/test-logs, the sum last.
TEST(RunAll, OneLinePerBinaryAndTheSumLast) {
    const std::string dir = temp_dir();
    mkdir((dir + "/tests").c_str(), 0755);
    auto fake = [&](const std::string& name, const std::string& output, int rc) {
        const std::string path = dir + "/tests/" + name;
        write(path + ".txt", output);
        write(path, "#!/bin/sh\ncat " + path + ".txt\nexit " + std::to_string(rc) + "\n");
        chmod(path.c_str(), 0755);
        return path;
    };
    const std::string skip = "[ RUN      ] Gpu.A\nx.cu:3: Skipped\nno CUDA device\n\n[  SKIPPED ] Gpu.A (0 ms)\n";
    const std::string good = fake("test_good", "[ RUN      ] Cpu.A\n[       OK ] Cpu.A (1 ms)\n" + skip + skip +
                                  "[  PASSED  ] 1 test.\n[  SKIPPED ] 2 tests, listed below:\n[  SKIPPED ] Gpu.A\n"
                                  "[  SKIPPED ] Gpu.A\n", 0);
    const std::string bad = fake("test_bad", "[ RUN      ] Cpu.B\nx.cpp:9: Failure\nExpected equality\n"
                                 "[  FAILED  ] Cpu.B (2 ms)\n[ RUN      ] Cpu.C\n[       OK ] Cpu.C (0 ms)\n"
                                 "[  PASSED  ] 1 test.\n[  FAILED  ] 1 test, listed below:\n[  FAILED  ] Cpu.B\n", 1);
    const std::string crash = fake("test_crash", "[ RUN      ] Cpu.D\nSegmentation fault\n", 139);
    RunResult r = run_cmd("bash tests/run_all.sh " + good + " " + bad + " " + crash);
    EXPECT_NE(r.code, 0);
    std::vector<std::string> lines;
    std::stringstream ss(r.out);
    for (std::string l; std::getline(ss, l);) lines.push_back(l);
    ASSERT_GE(lines.size(), 4u) << r.out;
    EXPECT_EQ(lines.back(), "2 passed, 2 failed, 2 skipped");
    EXPECT_EQ(lines[0].rfind("test_good", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find("1 passed, 0 failed, 2 skipped"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("(skipped: no CUDA device (2 tests))"), std::string::npos) << lines[0];
    EXPECT_EQ(lines[1].rfind("test_bad", 0), 0u) << lines[1];
    EXPECT_NE(r.out.find("Expected equality"), std::string::npos);
    EXPECT_EQ(r.out.find("Cpu.C"), std::string::npos) << "a passing test's output was shown";
    EXPECT_NE(r.out.find("test_crash exited with status 139"), std::string::npos);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 11) << r.out;   // 3 + 4 of Cpu.B + 3 of the crash + 1
    EXPECT_TRUE(file_exists(dir + "/test-logs/test_good.log"));
    EXPECT_NE(read_file(dir + "/test-logs/test_bad.log").find("Cpu.C"), std::string::npos);
}

}  // namespace
