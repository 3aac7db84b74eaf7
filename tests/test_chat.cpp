// test_chat.cpp: chat templates (src/chat.cpp). Every known template file is recognized, any
// other text is a clear error; render_chat equals transformers' apply_chat_template on every
// conversation of tests/fixtures/chat_refs.json; a model folder's template is found as
// transformers finds it; a conversation that reuses its KV cache replies as one prefilled whole.
#include <dirent.h>

#include <algorithm>

#include "chat.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

const std::string kTemplates = "tests/fixtures/chat_templates/";

std::vector<std::string> template_files() {
    std::vector<std::string> files;
    if (DIR* d = opendir(kTemplates.c_str())) {
        while (dirent* e = readdir(d)) {
            const std::string name = e->d_name;
            if (name.size() > 6 && name.substr(name.size() - 6) == ".jinja") files.push_back(name);
        }
        closedir(d);
    }
    std::sort(files.begin(), files.end());
    return files;
}

TEST(ChatTemplate, EveryFixtureIsRecognized) {
    const auto files = template_files();
    ASSERT_EQ(files.size(), 4u);
    for (const std::string& f : files) {
        const std::string text = read_file(kTemplates + f);
        EXPECT_NO_THROW(recognize_chat_template(text, f)) << f;
        // Line ends and surrounding blanks do not matter (a chat_template.jinja ends in a newline).
        std::string crlf;
        for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
        EXPECT_EQ(recognize_chat_template("\n  " + crlf + "\n", f).name, recognize_chat_template(text, f).name) << f;
    }
    EXPECT_EQ(recognize_chat_template(read_file(kTemplates + "olmo2_instruct.jinja"), "x").bos_first, true);
    EXPECT_EQ(recognize_chat_template(read_file(kTemplates + "tulu.jinja"), "x").bos_first, false);
}

TEST(ChatTemplate, OtherTemplatesAreOneLineErrors) {
    std::string text = read_file(kTemplates + "tulu.jinja");
    text[text.find("<|user|>") + 2] = 'U';   // one character changed
    expect_error([&] { recognize_chat_template(text, "m/tokenizer_config.json"); },
                 {"m/tokenizer_config.json", "not one this program can render", "OLMo-2 Instruct", "{% for message"});
    expect_error([&] { recognize_chat_template("{{ messages }}\n\n", "t.jinja"); }, {"t.jinja", "{{ messages }}"});
    try {
        recognize_chat_template("{% for m in messages %}\n{{ m }}\n{% endfor %}", "t.jinja");
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
}

// Issue 17's acceptance check: our rendering equals transformers' on the real templates.
TEST(ChatTemplate, RenderingEqualsTransformers) {
    const json refs = json::parse(read_file("tests/fixtures/chat_refs.json"));
    ASSERT_GE(refs["cases"].size(), 40u);
    for (const json& c : refs["cases"]) {
        const std::string name = c["template"];
        ChatTemplate t = recognize_chat_template(read_file(kTemplates + name), name);
        t.bos_token = c["bos_token"];
        t.eos_token = c["eos_token"];
        std::vector<ChatMessage> messages;
        for (const json& m : c["messages"]) messages.push_back({m["role"], m["content"]});
        EXPECT_EQ(render_chat(t, messages, c["add_generation_prompt"]), c["text"].get<std::string>())
            << name << ": " << c["messages"].dump();
    }
}

TEST(ChatTemplate, UnknownRoleIsAnError) {
    ChatTemplate t = recognize_chat_template(read_file(kTemplates + "olmo.jinja"), "olmo.jinja");
    expect_error([&] { render_chat(t, {{"tool", "x"}}, true); }, {"unknown role \"tool\""});
}

// A model folder's template: chat_template.jinja first, else tokenizer_config.json's (a string
// or the "default" of a list), with its bos and eos tokens (strings or AddedToken objects).
TEST(ChatTemplate, LoadedFromTheModelFolder) {
    const std::string dir = temp_dir(), tulu = read_file(kTemplates + "tulu.jinja");
    expect_error([&] { load_chat_template(dir); }, {dir, "no chat template", "Instruct"});
    json cfg = {{"chat_template", read_file(kTemplates + "olmo2_instruct.jinja")},
                {"bos_token", {{"content", "<|endoftext|>"}, {"special", true}}}, {"eos_token", "<|im_end|>"}};
    write(dir + "/tokenizer_config.json", cfg.dump());
    ChatTemplate t = load_chat_template(dir);
    EXPECT_TRUE(t.bos_first);
    EXPECT_EQ(t.bos_token, "<|endoftext|>");
    EXPECT_EQ(t.eos_token, "<|im_end|>");
    cfg["chat_template"] = json::array({{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", tulu}}});
    write(dir + "/tokenizer_config.json", cfg.dump());
    EXPECT_FALSE(load_chat_template(dir).bos_first);
    write(dir + "/chat_template.jinja", read_file(kTemplates + "olmo.jinja") + "\n");
    EXPECT_EQ(load_chat_template(dir).style, ChatTemplate::Style::ChatML);
    write(dir + "/chat_template.jinja", "{{ nope }}");
    expect_error([&] { load_chat_template(dir); }, {dir + "/chat_template.jinja", "not one this program can render"});
    std::remove((dir + "/chat_template.jinja").c_str());
    cfg.erase("eos_token");
    write(dir + "/tokenizer_config.json", cfg.dump());
    expect_error([&] { load_chat_template(dir); }, {"tokenizer_config.json", "needs eos_token"});
    write(dir + "/tokenizer_config.json", "{\"chat_template\": ");
    expect_error([&] { load_chat_template(dir); }, {"tokenizer_config.json", "malformed JSON"});
}

// With the real OLMo tokenizer the markers are single ids, and a reply stops at eos and at the
// template's end of turn.
TEST(ChatTemplate, StopIdsWithTheDolma2Tokenizer) {
    auto tok = load_tokenizer("tests/tokenizers/allenai_dolma2.json");
    ChatTemplate t = recognize_chat_template(read_file(kTemplates + "olmo.jinja"), "olmo.jinja");
    t.eos_token = "<|endoftext|>";
    EXPECT_EQ(chat_stop_ids(t, *tok, {100257}), (std::vector<int>{100257, 100265}));
    const std::vector<int> ids = tok->encode(render_chat(t, {{"user", "Hi"}}, true));
    EXPECT_EQ(ids.front(), 100264);   // <|im_start|>
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 100265), 2);   // <|im_end|> after system and user
    ChatTemplate tulu = recognize_chat_template(read_file(kTemplates + "tulu.jinja"), "tulu.jinja");
    tulu.eos_token = "<|endoftext|>";
    EXPECT_EQ(chat_stop_ids(tulu, *tok, {}), (std::vector<int>{100257}));
}

// A tiny random model with the dolma2 tokenizer.
struct ChatModel {
    ChatModel() {
        write_random_checkpoint(dir, tiny_dolma2_config(), 3);
        config = load_config(dir);
        ckpt = std::make_unique<Checkpoint>(dir);
        tok = load_tokenizer("tests/tokenizers/allenai_dolma2.json");
        t = recognize_chat_template(read_file(kTemplates + "olmo2_instruct.jinja"), "x");
        t.bos_token = t.eos_token = "<|endoftext|>";
    }
    std::unique_ptr<Engine> engine() const { return make_cpu_engine(config, *ckpt, 512); }
    std::string dir = temp_dir();
    ModelConfig config;
    std::unique_ptr<Checkpoint> ckpt;
    std::unique_ptr<Tokenizer> tok;
    ChatTemplate t;
};

std::string reply_text(ChatSession& chat, const std::string& text) {
    std::FILE* sink = std::tmpfile();
    std::string r = chat.reply(text, sink);
    std::fclose(sink);
    return r;
}

// The second turn prefills only what the cache lacks, and replies as a session that prefills
// the whole conversation at once.
TEST(ChatSession, SecondTurnReusesTheCacheAndRepliesTheSame) {
    ChatModel m;
    const ChatSettings s{"Be brief.", SamplingParams{}, 12, false, {100257}};
    auto eng_a = m.engine(), eng_b = m.engine();
    ChatSession a(*eng_a, *m.tok, m.t, s);
    const std::string r1 = reply_text(a, "Hello there");
    const int cached_after_1 = eng_a->n_past();
    EXPECT_GT(cached_after_1, 0);
    const std::string r2 = reply_text(a, "And then?");
    EXPECT_GT(a.reused(), 0u);

    ChatSession b(*eng_b, *m.tok, m.t, s);
    b.add({"user", "Hello there"});
    b.add({"assistant", r1});
    EXPECT_EQ(reply_text(b, "And then?"), r2);
    EXPECT_EQ(b.reused(), 0u);
    // A conversation longer than the context is an error, and the session goes on.
    ChatSession c(*eng_b, *m.tok, m.t, s);
    std::string long_text;
    for (int i = 0; i < 600; i++) long_text += " x";   // one token each
    expect_error([&] { reply_text(c, long_text); }, {"the conversation has", "context is 512", "/reset"});
    EXPECT_NO_THROW(reply_text(c, "short"));
}

}  // namespace
