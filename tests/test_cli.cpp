// test_cli.cpp: ./generate as a user runs it: --help, bad flags and bad inputs give one clear
// line on stderr and a non-zero exit, seeds are reproducible, and greedy ids on every golden
// fixture equal transformers' generate(). Runs the ./generate built in the repository root.
#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "decoding.h"

#include "golden.h"
#include "safetensors.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

class Cli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = temp_dir();
        write_random_checkpoint(dir_, tiny_olmo2_config());
        model_ = " --device cpu --model " + dir_ + " ";
    }
    std::string dir_, model_;
};

TEST_F(Cli, HelpExplainsEveryFlag) {
    RunResult r = run_cmd("./generate --help");
    EXPECT_EQ(r.code, 0);
    for (const char* flag : {"--model", "--tokenizer", "--prompt", "--prompt-file", "--prompt-ids", "--max-new-tokens",
                             "--temperature", "--top-k", "--top-p", "--seed", "--device", "--dtype", "--max-seq-len",
                             "--stats", "--output-ids", "--random-weights", "--prompt-len", "--quiet", "--chat",
                             "--system", "--verbose-prompt", "--threads", "--n-gpu-layers", "--ctx-size", "--temp",
                             "--version", "generation_config.json", "physical core", "--min-p",
                             "--repeat-penalty", "--stop", "--json", "--logprobs", "--tp", "--cp"})
        EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

TEST_F(Cli, BadFlagValues) {
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids -n 0", "--max-new-tokens");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --tp 0", "--tp");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --cp 0", "--cp");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --tp 2", "--tp splits the model over GPUs");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --cp 2", "--cp shares a prompt between GPUs");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --tp 2 --cp 2", "--tp and --cp cannot be combined yet");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --temperature -1", "--temperature");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --top-p 0", "--top-p");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --top-p 1.5", "--top-p");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --top-k -3", "--top-k");
    expect_cli_error("--device tpu --prompt-ids 1", "--device");
    expect_cli_error("--dtype int8 --prompt-ids 1", "--dtype");
    expect_cli_error(model_ + "--prompt-ids 1,x,3 --output-ids", "\"x\" is not a token id");
    expect_cli_error(model_ + "--prompt-ids 1,2,999 --output-ids", "token id 999 is outside the vocabulary");
    expect_cli_error(model_ + "--prompt-ids 1 --output-ids --no-such-flag", "--no-such-flag");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --min-p 1.5", "--min-p");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --min-p -0.1", "--min-p");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --repeat-penalty 0", "--repeat-penalty");
    expect_cli_error(model_ + "--prompt-ids 1,2 --json --logprobs -1", "--logprobs");
    expect_cli_error(model_ + "--prompt-ids 1,2 --json --output-ids", "--json and --output-ids exclude each other");
    expect_cli_error(model_ + "--prompt-ids 1,2 --output-ids --stop x", "--stop needs a tokenizer");
    expect_cli_error("--device cpu -p hi --stop ''", "--stop: a stop string is empty");
    expect_cli_error("--device cpu -p hi --beams 2 --logprobs 2", "--logprobs: beam search");
}

TEST_F(Cli, BadInputs) {
    if (!olmo::cuda_available()) expect_cli_error("--device cuda --model " + dir_ + " --prompt-ids 1 --output-ids", "CUDA");
    expect_cli_error("--device cpu --model /nonexistent/dir --prompt-ids 1 --output-ids", "/nonexistent/dir/config.json: cannot open");
    expect_cli_error(model_ + "--prompt-ids 1 --max-seq-len 100", "exceeds the model's max_position_embeddings (64)");
    expect_cli_error(model_ + "--prompt-ids 1,2,3,4,5 --output-ids --max-seq-len 4", "the prompt has 5 tokens but the context is 4");
    expect_cli_error(model_ + "--prompt hello", "no tokenizer found");
    expect_cli_error(model_ + "--prompt-ids 1 --output-ids --prompt-file /nonexistent.txt --tokenizer /nonexistent.model",
                     "/nonexistent.model: cannot open");
    json cfg = tiny_olmo2_config();
    cfg["model_type"] = "llama";
    write(dir_ + "/config.json", cfg.dump());
    expect_cli_error(model_ + "--prompt-ids 1 --output-ids", "unsupported model_type \"llama\"");
    // A truncated weights file.
    write(dir_ + "/config.json", tiny_olmo2_config().dump());
    std::string w = read_file(dir_ + "/model.safetensors");
    write(dir_ + "/model.safetensors", w.substr(0, w.size() / 2));
    expect_cli_error(model_ + "--prompt-ids 1 --output-ids", "model.safetensors");
}

std::vector<int> parse_ids(const std::string& s) {
    std::vector<int> ids;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) ids.push_back(std::stoi(item));
    return ids;
}

TEST_F(Cli, SeedsAreReproducible) {
    const std::string args = model_ + "--prompt-ids 3,1,4,1,5 --output-ids -n 20 --temperature 1.5 --top-k 40 --top-p 0.9";
    RunResult a = run_cmd("./generate" + args + " --seed 7"), b = run_cmd("./generate" + args + " --seed 7");
    RunResult c = run_cmd("./generate" + args + " --seed 8");
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(parse_ids(a.out).size(), 20u);
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, c.out);
}

TEST_F(Cli, StatsAndContextCap) {
    RunResult r = run_cmd("./generate" + model_ + "--prompt-ids 3,1,4 --output-ids -n 50 --max-seq-len 10 --stats --temperature 0");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(parse_ids(r.out).size(), 7u);   // capped by the context
    for (const char* s : {"capped", "time to 1st tok", "prefill", "decode", "memory", "GB of weights"})
        EXPECT_NE(r.err.find(s), std::string::npos) << s;
    EXPECT_EQ(r.err.find("loading weights"), std::string::npos) << "a progress line, but stderr is not a terminal";
}

// Issue 2's acceptance check: greedy ids from the command line equal transformers' on every fixture.
TEST(CliGolden, GreedyIdsEqualTransformers) {
    auto fixtures = list_fixtures();
    for (const auto& name : fixtures) {
        const std::string dir = "tests/fixtures/" + name;
        SafeTensorsFile g(dir + "/golden.safetensors");
        std::vector<int> prompt = to_i32(*g.find("prompt_ids")), want = to_i32(*g.find("greedy_ids"));
        std::string ids;
        for (int id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
        RunResult r = run_cmd("./generate --device cpu --model " + dir + " --prompt-ids " + ids +
                              " --temperature 0 --output-ids -n " + std::to_string(want.size()));
        ASSERT_EQ(r.code, 0) << name << ": " << r.err;
        EXPECT_EQ(parse_ids(r.out), want) << name;
    }
    if (fixtures.empty()) GTEST_SKIP() << "no fixtures in tests/fixtures";
}

}  // namespace

namespace {

// Batched generation from the command line: each prompt's text equals its single-prompt run.
TEST(CliBatch, RepeatedPromptsMatchSingleRuns) {
    const std::string base = "./generate --device cpu --temperature 0 -n 12 ";
    RunResult both = run_cmd(base + "-p 'Once upon a time' -p 'The little rabbit'");
    RunResult a = run_cmd(base + "-p 'Once upon a time'"), b = run_cmd(base + "-p 'The little rabbit'");
    ASSERT_EQ(both.code, 0) << both.err;
    EXPECT_EQ(both.out, "[0] " + a.out + "[1] " + b.out);
    std::string d = temp_dir();
    write(d + "/prompts.txt", "Once upon a time\nThe little rabbit\n");
    RunResult file = run_cmd(base + "--prompts-file " + d + "/prompts.txt");
    EXPECT_EQ(file.out, both.out);
}

TEST(CliBatch, BeamsAndPoolErrors) {
    RunResult r = run_cmd("./generate --device cpu -n 8 --beams 3 -p 'Once upon a time' --stats");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u);
    EXPECT_NE(r.err.find("KV pool"), std::string::npos);
    expect_cli_error("--device cpu -n 8 --beams 0 -p x", "--beams");
    expect_cli_error("--device cpu -n 400 --kv-pool-gb 0.000001 -p 'Once upon a time'", "does not fit the KV pool");
}

}  // namespace

namespace {

// A folder with a tiny random model of OLMo-2's vocabulary and the real dolma2 tokenizer.json.
std::string dolma2_model_dir() {
    const std::string dir = temp_dir();
    write_random_checkpoint(dir, tiny_dolma2_config());
    write(dir + "/tokenizer.json", read_file("tests/tokenizers/allenai_dolma2.json"));
    return dir;
}

// A model folder with the real OLMo-2 tokenizer.json: ./generate uses it by default, and
// --tokenizer overrides it (by content: a sentencepiece model works too).
TEST(CliTokenizer, ModelFolderTokenizerJsonIsUsed) {
    const std::string dir = dolma2_model_dir();
    RunResult r = run_cmd("./generate --device cpu --model " + dir + " -p 'Hello world' -n 3 --temperature 0");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("Hello world", 0), 0u) << r.out;
    RunResult ids = run_cmd("./generate --device cpu --model " + dir + " -p 'Hello world' -n 3 --temperature 0 --output-ids");
    RunResult direct = run_cmd("./generate --device cpu --model " + dir + " --prompt-ids 9906,1917 -n 3 --temperature 0 --output-ids");
    EXPECT_EQ(ids.out, direct.out);   // "Hello world" is [9906, 1917] in dolma2, as tokenizers says
    RunResult sp = run_cmd("./generate --device cpu --model " + dir + " --tokenizer tokenizer/tokenizer.model -p 'Hello' -n 2 --temperature 0");
    ASSERT_EQ(sp.code, 0) << sp.err;
    EXPECT_EQ(sp.out.rfind("Hello", 0), 0u);
}

}  // namespace

namespace {

std::string id_list(const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
    return out;
}

// The text ./generate streams equals ./tokenize's one-shot decode of the prompt and the ids the
// same run prints with --output-ids (less a final end-of-sequence id, which is not printed).
void expect_streamed_text_equals_decode(const std::string& args, const std::string& tokenizer, const std::string& prompt,
                                        int eos) {
    RunResult text = run_cmd("./generate " + args + " --prompt-ids " + prompt);
    RunResult ids = run_cmd("./generate " + args + " --prompt-ids " + prompt + " --output-ids");
    ASSERT_EQ(text.code, 0) << text.err;
    ASSERT_EQ(ids.code, 0) << ids.err;
    std::vector<int> all = parse_ids(prompt), generated = parse_ids(ids.out);
    EXPECT_GE(generated.size(), 100u) << "stopped early: too short to test streaming";
    all.insert(all.end(), generated.begin(), generated.end());
    if (all.back() == eos) all.pop_back();
    RunResult decoded = run_cmd("./tokenize --skip-special --tokenizer " + tokenizer + " --decode " + id_list(all));
    ASSERT_EQ(decoded.code, 0) << decoded.err;
    EXPECT_EQ(text.out, decoded.out + "\n");
}

// The default model (sentencepiece), greedy.
TEST(CliStream, SentencePieceTextEqualsOneShotDecode) {
    expect_streamed_text_equals_decode("--device cpu --temperature 0 -n 300", "tokenizer/tokenizer.model", "1,400,500,600", 2);
}

// A random model with the dolma2 tokenizer.json, sampling freely: tokens that end inside a
// character, special tokens and ids past the tokenizer's vocabulary all come up.
TEST(CliStream, ByteLevelBpeTextEqualsOneShotDecode) {
    const std::string dir = dolma2_model_dir();
    expect_streamed_text_equals_decode("--device cpu --model " + dir + " --temperature 1 --top-k 0 --top-p 1 --seed 5 -n 300",
                                       dir + "/tokenizer.json", "9906,1917", 1000);
}

}  // namespace

namespace {

RunResult generate_ok(const std::string& args) {
    RunResult r = run_cmd("./generate " + args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    return r;
}

// llama.cpp's spellings: -m, -c/--ctx-size, --temp, -t/--threads (threads, not temperature),
// --version, -ngl (accepted, explained).
TEST_F(Cli, LlamaCppSpellings) {
    const std::string ids = " --prompt-ids 3,1,4,1,5 --output-ids -n 6";
    RunResult plain = generate_ok("--device cpu --model " + dir_ + " --max-seq-len 16 --temperature 0" + ids);
    RunResult llama = generate_ok("--device cpu -m " + dir_ + " -c 16 --temp 0 -t 1 -ngl 99" + ids);
    EXPECT_EQ(llama.out, plain.out);
    EXPECT_NE(llama.err.find("-ngl/--n-gpu-layers: ignored"), std::string::npos) << llama.err;
    EXPECT_EQ(generate_ok("-m " + dir_ + " --ctx-size 16 --temp 0 --threads 2 -ngl 0" + ids).out, plain.out);
    // -t is threads: temperature 8 would sample; with no generation_config.json, decoding is greedy.
    EXPECT_EQ(generate_ok("--device cpu -m " + dir_ + " -c 16 -t 8" + ids).out, plain.out);
    RunResult v = generate_ok("--version");
    EXPECT_NE(v.out.find("olmo.cu"), std::string::npos) << v.out;
    expect_cli_error(model_ + "-t -2" + ids, "--threads");
}

// generation_config.json supplies do_sample, temperature, top_k, top_p, max_new_tokens as
// transformers reads them; flags override.
TEST_F(Cli, GenerationConfigDefaults) {
    const std::string ids = model_ + "--prompt-ids 3,1,4,1,5 --output-ids --seed 3";
    auto with_config = [&](const json& g, const std::string& flags) {
        write(dir_ + "/generation_config.json", g.dump());
        return generate_ok(ids + " " + flags).out;
    };
    const std::string greedy = with_config({{"do_sample", false}, {"temperature", 0.6}}, "-n 20");
    EXPECT_EQ(greedy, with_config(json::object(), "-n 20")) << "HF's default is greedy";
    EXPECT_EQ(greedy, with_config({{"do_sample", true}}, "-n 20 --temp 0"));
    const std::string sampled = with_config({{"do_sample", true}, {"temperature", 1.5}, {"top_k", 40}, {"top_p", 0.9}}, "-n 20");
    EXPECT_NE(sampled, greedy);
    EXPECT_EQ(sampled, with_config(json::object(), "-n 20 --temp 1.5 --top-k 40 --top-p 0.9"));
    EXPECT_EQ(with_config({{"do_sample", true}}, "-n 20"), with_config(json::object(), "-n 20 --temp 1 --top-k 50 --top-p 1"))
        << "sampling without values uses transformers' defaults";
    EXPECT_EQ(parse_ids(with_config({{"max_new_tokens", 5}}, "")).size(), 5u);
    EXPECT_EQ(parse_ids(with_config({{"max_new_tokens", 5}}, "-n 7")).size(), 7u);
    EXPECT_EQ(parse_ids(with_config(json::object(), "")).size(), 59u) << "128, capped by the context of 64 (5 in the prompt)";
    write(dir_ + "/generation_config.json", json{{"do_sample", "yes"}}.dump());
    expect_cli_error(ids, "generation_config.json: \"do_sample\" must be true or false");
    write(dir_ + "/generation_config.json", json{{"top_p", 0}}.dump());
    expect_cli_error(ids, "generation_config.json: \"top_p\" must be a number in [1e-06, 1]");
    write(dir_ + "/generation_config.json", json{{"top_k", -1}}.dump());
    expect_cli_error(ids, "generation_config.json: \"top_k\"");
}

// A Hugging Face cache folder (models--org--name) loads refs/main's snapshot.
TEST(CliLoading, HuggingFaceCacheFolder) {
    const std::string cache = temp_dir() + "/models--allenai--tiny", snap = cache + "/snapshots/0123abcd";
    ASSERT_EQ(std::system(("mkdir -p " + snap + " " + cache + "/refs").c_str()), 0);
    write_random_checkpoint(snap, tiny_olmo2_config());
    const std::string args = " --prompt-ids 3,1,4 --output-ids -n 5 --temp 0 --device cpu";
    expect_cli_error("--model " + cache + args, cache + ": a Hugging Face cache folder without refs/main (snapshots: 0123abcd)");
    write(cache + "/refs/main", "0123abcd\n");
    EXPECT_EQ(generate_ok("--model " + cache + args).out, generate_ok("--model " + snap + args).out);
    write(cache + "/refs/main", "feedbeef");
    expect_cli_error("--model " + cache + args, "refs/main names snapshot feedbeef, which is missing");
    write(cache + "/refs/main", "../../etc");
    expect_cli_error("--model " + cache + args, "is not a snapshot name");
}

// A tokenizer with more ids than the model's vocabulary is refused before anything runs.
TEST_F(Cli, TokenizerLargerThanTheVocabulary) {
    expect_cli_error(model_ + "--tokenizer tests/tokenizers/allenai_dolma2.json -p hi",
                     "allenai_dolma2.json: the tokenizer has 100278 ids but the model's vocab_size is 64");
}

// dolma2_model_dir() with OLMo-2 Instruct's tokenizer_config.json (template, bos and eos).
std::string instruct_model_dir() {
    const std::string dir = dolma2_model_dir();
    json cfg = {{"chat_template", read_file("tests/fixtures/chat_templates/olmo2_instruct.jinja")},
                {"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}};
    write(dir + "/tokenizer_config.json", cfg.dump());
    return dir;
}

// One-shot chat: each -p is a turn; --verbose-prompt shows each prompt rendered, with the
// earlier reply in the history.
TEST(CliChat, OneShotTurnsWithVerbosePrompt) {
    const std::string dir = instruct_model_dir();
    RunResult r = generate_ok("--device cpu -m " + dir + " --chat -p Hi -p 'And you?' --system 'Be brief.' "
                              "--verbose-prompt --temp 0 -n 4");
    EXPECT_NE(r.err.find("as rendered:\n<|endoftext|><|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n\nprompt ids: "
                         "100257,"), std::string::npos) << r.err;
    const size_t second = r.err.find("<|user|>\nAnd you?\n<|assistant|>\n");
    ASSERT_NE(second, std::string::npos) << r.err;
    EXPECT_NE(r.err.rfind("<|endoftext|>\n<|user|>\nAnd you?", second), std::string::npos) << "the first reply, then eos";
    EXPECT_FALSE(r.out.empty());
    // Without --chat, --verbose-prompt shows the prompt as tokenized.
    RunResult plain = generate_ok("--device cpu -m " + dir + " -p 'Hello world' --verbose-prompt --temp 0 -n 2");
    EXPECT_NE(plain.err.find("Hello world\nprompt ids: 9906,1917\n"), std::string::npos) << plain.err;
}

// Interactive chat from stdin: empty lines skipped, /reset forgets, /exit ends (the rest of
// the input is not read), end of input ends cleanly.
TEST(CliChat, StdinConversation) {
    const std::string dir = instruct_model_dir(), in = temp_dir() + "/in.txt";
    const std::string cmd = "sh -c './generate --device cpu -m " + dir + " --chat --verbose-prompt --temp 0 -n 3 < " + in + "'";
    write(in, "first message\n\n/reset\nsecond message\n/exit\nnever read\n");
    RunResult r = run_cmd(cmd);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("> "), std::string::npos) << "no prompt marker when stdin is not a terminal";
    const size_t second = r.err.find("<|user|>\nsecond message");
    ASSERT_NE(second, std::string::npos) << r.err;
    EXPECT_EQ(r.err.substr(second).find("first message"), std::string::npos) << "/reset forgets the first message";
    EXPECT_EQ(r.err.find("never read"), std::string::npos);
    write(in, "only line, no /exit");
    EXPECT_EQ(run_cmd(cmd).code, 0);
}

TEST(CliChat, Errors) {
    const std::string dir = dolma2_model_dir();
    expect_cli_error("--device cpu --chat -p hi", "no chat template");
    expect_cli_error("--device cpu -m " + dir + " --chat -p hi", dir + ": no chat template");
    write(dir + "/tokenizer_config.json", json{{"chat_template", "{{ messages }}"}, {"eos_token", "x"}}.dump());
    expect_cli_error("--device cpu -m " + dir + " --chat -p hi", "tokenizer_config.json: the chat template \"{{ messages }}");
    expect_cli_error("--device cpu --chat -p hi --output-ids", "--chat takes its messages from -p or stdin");
    expect_cli_error("--device cpu -p hi --system 'x'", "--system needs --chat");
    expect_cli_error("--device cpu -cnv --beams 2", "excludes");
}

// --- the sampler and output flags (issue 17) ---

const std::string kGreedy = "./generate --device cpu --temperature 0 ";

// The text cut before the first occurrence of any of `stops` (the whole text if none occurs).
std::string cut_before(const std::string& text, const std::vector<std::string>& stops) {
    size_t first = std::string::npos;
    for (const std::string& s : stops) first = std::min(first, text.find(s));
    return text.substr(0, first);
}

std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string l; std::getline(ss, l);) out.push_back(l);
    return out;
}

// A stop string split across tokens cuts the streamed text before it; the earliest of several
// wins; with --output-ids the ids end at the token that completed it.
TEST(CliStop, CutsTheTextBeforeTheStopString) {
    const std::string args = kGreedy + "-n 20 -p 'Once upon a time' ";
    RunResult plain = run_cmd(args), ids = run_cmd(args + "--output-ids");
    ASSERT_EQ(plain.code, 0) << plain.err;
    ASSERT_NE(plain.out.find("ed to pl"), std::string::npos) << "the greedy text changed: " << plain.out;
    RunResult one = run_cmd(args + "--stop 'ed to pl'");
    EXPECT_EQ(one.out, cut_before(plain.out, {"ed to pl"}) + "\n");
    RunResult two = run_cmd(args + "--stop 'ed to pl' --stop 'little'");
    EXPECT_EQ(two.out, cut_before(plain.out, {"little"}) + "\n");
    RunResult none = run_cmd(args + "--stop 'no such words'");
    EXPECT_EQ(none.out, plain.out);
    RunResult stopped_ids = run_cmd(args + "--output-ids --stop 'ed to pl'");
    const std::vector<int> all = parse_ids(ids.out), some = parse_ids(stopped_ids.out);
    ASSERT_LT(some.size(), all.size());
    EXPECT_EQ(some, std::vector<int>(all.begin(), all.begin() + some.size()));
}

// Batches and beams: each sequence's continuation is cut at its own stop string; JSON says "stop".
TEST(CliStop, BatchJsonAndBeams) {
    const std::vector<std::string> prompts = {"Once upon a time", "The little rabbit"};
    const std::string two_prompts = "-n 16 -p '" + prompts[0] + "' -p '" + prompts[1] + "' ";
    RunResult plain = run_cmd(kGreedy + two_prompts), cut = run_cmd(kGreedy + two_prompts + "--stop ' a'");
    ASSERT_EQ(plain.code, 0) << plain.err;
    std::vector<std::string> a = lines_of(plain.out), b = lines_of(cut.out);   // in the order they ended
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(b.size(), 2u) << cut.out;
    int stopped = 0;
    for (size_t k = 0; k < 2; k++) {
        const std::string &pl = a.at(k), &cl = b[k];
        const std::string head = pl.substr(0, 4) + prompts.at(pl[1] - '0');
        EXPECT_EQ(cl, head + cut_before(pl.substr(head.size()), {" a"}));
        stopped += cl.size() < pl.size();
    }
    EXPECT_EQ(stopped, 2) << plain.out;
    RunResult j = run_cmd(kGreedy + two_prompts + "--json --stop ' a'");
    int n = 0;
    for (const std::string& line : lines_of(j.out)) {
        const json o = json::parse(line);
        EXPECT_EQ(o["text"].get<std::string>().find(" a"), std::string::npos);
        EXPECT_EQ(o["finish_reason"], "stop");
        EXPECT_LT(o["ids"].size(), 16u);
        n++;
    }
    EXPECT_EQ(n, 2);
    RunResult beam = run_cmd(kGreedy + "-n 16 --beams 2 -p '" + prompts[0] + "'");
    RunResult beam_cut = run_cmd(kGreedy + "-n 16 --beams 2 -p '" + prompts[0] + "' --stop ' a'");
    ASSERT_EQ(beam.code, 0) << beam.err;
    EXPECT_EQ(beam_cut.out, prompts[0] + cut_before(beam.out.substr(prompts[0].size()), {" a"}) + "\n");
    EXPECT_LT(beam_cut.out.size(), beam.out.size());
}


// --json on a golden fixture (no tokenizer: ids only): greedy ids equal transformers', each
// token's logprob equals log_softmax of the golden logits of its step, and the top alternatives
// are the golden logits' largest.
TEST(CliJson, LogprobsEqualLogSoftmaxOfGoldenLogits) {
    Fixture f("olmo2_gqa");
    const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids")), greedy = to_i32(*f.golden.find("greedy_ids"));
    const std::vector<float> last = last_prompt_logits(f.golden), decode = to_f32(*f.golden.find("decode_logits"));
    const int V = f.cfg.vocab, steps = (int)decode.size() / V + 1;
    RunResult r = run_cmd("./generate --device cpu --model " + f.dir + " --prompt-ids " + id_list(prompt) +
                          " --temperature 0 --json --logprobs 3 -n " + std::to_string(steps));
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(lines_of(r.out).size(), 1u) << r.out;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["ids"].get<std::vector<int>>(), std::vector<int>(greedy.begin(), greedy.begin() + steps));
    EXPECT_EQ(j["prompt_ids"].get<std::vector<int>>(), prompt);
    EXPECT_EQ(j["finish_reason"], "length");
    EXPECT_FALSE(j.contains("text"));
    ASSERT_EQ(j["logprobs"].size(), (size_t)steps);
    for (int s = 0; s < steps; s++) {
        const float* l = s == 0 ? last.data() : decode.data() + (size_t)(s - 1) * V;
        double mx = *std::max_element(l, l + V), sum = 0;
        for (int i = 0; i < V; i++) sum += std::exp(l[i] - mx);
        auto log_softmax = [&](int i) { return l[i] - mx - std::log(sum); };
        EXPECT_NEAR(j["logprobs"][s].get<double>(), log_softmax(greedy[s]), 1e-4) << "step " << s;
        std::vector<int> order(V);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 3, order.end(), [&](int a, int b) { return l[a] > l[b]; });
        for (int k = 0; k < 3; k++) {
            EXPECT_EQ(j["top_logprobs"][s][k]["id"], order[k]) << "step " << s;
            EXPECT_NEAR(j["top_logprobs"][s][k]["logprob"].get<double>(), log_softmax(order[k]), 1e-4);
        }
    }
    EXPECT_GT(j["timings"]["total_ms"].get<double>(), 0.0);
}

// JSON Lines for a batch, with prompts holding quotes, backslashes and a newline: every line is
// one object (nlohmann here; Python's json below when python3 is there).
const std::string kAwkwardPrompts = "-p 'She said \"stop\"' -p 'C:\\dir' -p 'Once upon\na time' ";

TEST(CliJson, BatchIsJsonLines) {
    RunResult r = run_cmd(kGreedy + "-n 6 --json " + kAwkwardPrompts);
    ASSERT_EQ(r.code, 0) << r.err;
    const std::vector<std::string> lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 3u) << r.out;
    std::set<int> seen;
    for (const std::string& line : lines) {
        const json j = json::parse(line);
        seen.insert(j["index"].get<int>());
        for (const char* key : {"prompt", "prompt_ids", "text", "ids", "tokens", "logprobs", "finish_reason", "timings"})
            EXPECT_TRUE(j.contains(key)) << key;
        EXPECT_EQ(j["ids"].size(), j["logprobs"].size());
        std::string joined;
        for (const auto& t : j["tokens"]) joined += t.get<std::string>();
        EXPECT_EQ(joined, j["text"].get<std::string>());
    }
    EXPECT_EQ(seen, (std::set<int>{0, 1, 2}));
    EXPECT_NE(r.out.find("\"prompt\":\"Once upon\\na time\""), std::string::npos);
}

TEST(CliJson, PythonJsonParsesIt) {
    if (run_cmd("command -v python3").code != 0) GTEST_SKIP() << "python3 not installed: checked with nlohmann only";
    const std::string d = temp_dir();
    write(d + "/check.py",
          "import json, sys\n"
          "objs = [json.loads(line) for line in sys.stdin]\n"
          "assert sorted(o['index'] for o in objs) == [0, 1, 2], objs\n"
          "for o in objs:\n"
          "    assert len(o['ids']) == len(o['logprobs']) == len(o['top_logprobs']) == len(o['tokens'])\n"
          "    assert all(len(t) == 2 for t in o['top_logprobs'])\n"
          "    assert ''.join(o['tokens']) == o['text'] and o['finish_reason'] in ('stop', 'eos', 'length')\n"
          "print('ok', len(objs))\n");
    RunResult r = run_cmd("(" + kGreedy + "-n 6 --logprobs 2 " + kAwkwardPrompts + "| python3 " + d + "/check.py)");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "ok 3\n");
}

// Plain batch output: one line per sequence, "[k] " + the text with \ \n \r escaped; unescaped,
// each equals that prompt's single run.
TEST(CliBatch, LinesAreEscapedAndOnePerSequence) {
    RunResult r = run_cmd(kGreedy + "-n 8 " + kAwkwardPrompts);
    ASSERT_EQ(r.code, 0) << r.err;
    const std::vector<std::string> lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 3u) << r.out;
    const std::vector<std::string> prompts = {"'She said \"stop\"'", "'C:\\dir'", "'Once upon\na time'"};
    for (const std::string& line : lines) {
        ASSERT_EQ(line[0], '[');
        const int k = line[1] - '0';
        std::string text;
        for (size_t i = 4; i < line.size(); i++) {
            if (line[i] != '\\') { text += line[i]; continue; }
            const char c = line[++i];
            text += c == 'n' ? '\n' : c == 'r' ? '\r' : c;
        }
        EXPECT_EQ(text + "\n", run_cmd(kGreedy + "-n 8 -p " + prompts[k]).out) << line;
    }
}

// --min-p 1 keeps only the most likely token: sampling at any temperature is greedy.
TEST(CliSampling, MinPOneIsGreedyAndSeedsRepeat) {
    const std::string args = "./generate --device cpu -n 16 -p 'The little rabbit' --output-ids ";
    RunResult greedy = run_cmd(args + "--temperature 0"), minp1 = run_cmd(args + "--temperature 1.5 --min-p 1 --seed 3");
    ASSERT_EQ(minp1.code, 0) << minp1.err;
    EXPECT_EQ(minp1.out, greedy.out);
    RunResult a = run_cmd(args + "--temperature 1 --min-p 0.05 --seed 9"), b = run_cmd(args + "--temperature 1 --min-p 0.05 --seed 9");
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, greedy.out);
}

// --repeat-penalty from the command line: the ids of the decoding loop with the same penalty
// (test_generation_options checks those against transformers), and not plain greedy's.
TEST(CliSampling, RepeatPenaltyGreedy) {
    Fixture f("olmo2_gqa");
    const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
    RunResult r = run_cmd("./generate --device cpu --model " + f.dir + " --prompt-ids " + id_list(prompt) +
                          " --temperature 0 --output-ids -n 24 --repeat-penalty 1.3");
    ASSERT_EQ(r.code, 0) << r.err;
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 8);
    SamplingParams s;
    s.repetition_penalty = 1.3f;
    EXPECT_EQ(parse_ids(r.out), generate(*eng, {Request{prompt, s, 24}}, f.cfg.eos_ids)[0]);
    const nlohmann::json refs = sampler_refs();
    if (!refs.is_null()) {
        EXPECT_EQ(parse_ids(r.out), refs["fixtures"]["olmo2_gqa"]["greedy_ids"].get<std::vector<int>>());
    }
}

}  // namespace
