// chat.cpp: the known chat templates, their rendering, and the conversation of --chat (see chat.h).
#include "chat.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common.h"

namespace olmo {

namespace {

using json = nlohmann::json;

// The template text as compared: \r\n as \n, without leading or trailing blanks. Nothing more
// is normalized: whitespace outside Jinja tags is output, so two texts that differ there can
// render differently.
std::string normalized(const std::string& text) {
    std::string s;
    for (size_t i = 0; i < text.size(); i++)
        if (!(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) s += text[i];
    const size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// FNV-1a, 64 bits: the fingerprint of a normalized template text.
uint64_t fnv1a(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

const char* const kNoFunctions = "You do not currently have access to any functions. <functions></functions>";

// The templates this program renders, by the fingerprint of their text. The texts are
// tests/fixtures/chat_templates/*.jinja (their sources: the README there); test_chat.cpp checks
// each fingerprint against its file and each rendering against transformers'.
struct KnownTemplate {
    uint64_t fingerprint;
    const char* file;
    ChatTemplate t;   // without the tokens, which come from the tokenizer's config
};
const std::vector<KnownTemplate>& known_templates() {
    using S = ChatTemplate::Style;
    static const std::vector<KnownTemplate> known = {
        {0x5afeb2d95c957f3dull, "tulu.jinja", {"tulu (open-instruct)", S::Tulu, false, "", "", "", ""}},
        {0x413797fa6df6fee5ull, "olmo2_instruct.jinja", {"OLMo-2 Instruct (tulu with bos)", S::Tulu, true, "", "", "", ""}},
        {0xbb88589d2a6d06efull, "olmo.jinja",
         {"olmo (open-instruct, OLMo-3 ChatML)", S::ChatML, false,
          std::string("You are OLMo, a helpful function-calling AI assistant built by Ai2. Your date cutoff is November "
                      "2024, and your model weights are available at https://huggingface.co/allenai. ") + kNoFunctions,
          std::string(" ") + kNoFunctions, "", ""}},
        {0xe6c0cd00d8219048ull, "olmo3.1_instruct.jinja",
         {"Olmo-3.1 Instruct (ChatML with tools)", S::ChatML, false,
          std::string("You are Olmo, a helpful AI assistant built by Ai2. Your date cutoff is December 2024, and your "
                      "model weights are available at https://huggingface.co/allenai. ") + kNoFunctions,
          "", "", ""}},
    };
    return known;
}

// A special token of tokenizer_config.json: a string, or an object with "content" (AddedToken).
std::string special_token(const json& cfg, const char* key, const std::string& where) {
    if (!cfg.contains(key) || cfg[key].is_null()) return "";
    const json& v = cfg[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    fail(where + ": \"" + key + "\" must be a string or an object with \"content\", got " + json_excerpt(v));
}

// tokenizer_config.json's "chat_template": a string, or [{"name", "template"}, ...] of which
// transformers uses the one named "default".
std::string template_text(const json& cfg, const std::string& where) {
    const json& v = cfg["chat_template"];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array())
        for (const json& e : v)
            if (e.is_object() && e.value("name", json()) == "default" && e.contains("template") && e["template"].is_string())
                return e["template"].get<std::string>();
    fail(where + ": \"chat_template\" must be a string or a list with a template named \"default\", got " +
         json_excerpt(v));
}

void render_tulu(std::string& out, const ChatTemplate& t, const ChatMessage& m, bool last) {
    if (m.role == "system") out += "<|system|>\n" + m.content + "\n";
    else if (m.role == "user") out += "<|user|>\n" + m.content + "\n";
    else out += "<|assistant|>\n" + m.content + t.eos_token + (last ? "" : "\n");
}

void render_chatml(std::string& out, const ChatTemplate& t, const ChatMessage& m, bool last) {
    if (m.role == "system") out += "<|im_start|>system\n" + m.content + t.system_suffix + "<|im_end|>\n";
    else if (m.role == "user") out += "<|im_start|>user\n" + m.content + "<|im_end|>\n";
    else out += "<|im_start|>assistant\n" + m.content + (last ? t.eos_token : "<|im_end|>\n");
}

}  // namespace

ChatTemplate recognize_chat_template(const std::string& text, const std::string& where) {
    const uint64_t h = fnv1a(normalized(text));
    std::string names;
    for (const KnownTemplate& k : known_templates()) {
        if (k.fingerprint == h) return k.t;
        names += std::string(names.empty() ? "" : ", ") + k.t.name;
    }
    std::string start = normalized(text).substr(0, 50);
    for (char& c : start)
        if (c == '\n') c = ' ';
    fail(where + ": the chat template \"" + start + "...\" is not one this program can render (it knows " + names +
         "; there is no Jinja engine here)");
}

ChatTemplate load_chat_template(const std::string& dir) {
    const std::string jinja = dir + "/chat_template.jinja", config = dir + "/tokenizer_config.json";
    json cfg = json::object();
    if (file_exists(config)) {
        try {
            cfg = json::parse(read_file(config));
        } catch (const json::exception& e) {
            fail(config + ": malformed JSON: " + e.what());
        }
        if (!cfg.is_object()) fail(config + ": not a JSON object");
    }
    ChatTemplate t;
    if (file_exists(jinja)) t = recognize_chat_template(read_file(jinja), jinja);
    else if (cfg.contains("chat_template")) t = recognize_chat_template(template_text(cfg, config), config);
    else fail(dir + ": no chat template (chat_template.jinja, or \"chat_template\" in tokenizer_config.json); --chat "
              "needs an Instruct checkpoint");
    t.bos_token = special_token(cfg, "bos_token", config);
    t.eos_token = special_token(cfg, "eos_token", config);
    if (t.eos_token.empty() || (t.bos_first && t.bos_token.empty()))
        fail(config + ": the chat template " + t.name + " needs " + (t.eos_token.empty() ? "eos_token" : "bos_token") +
             ", which is missing");
    return t;
}

std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    const bool chatml = t.style == ChatTemplate::Style::ChatML;
    std::string out = t.bos_first ? t.bos_token : "";
    bool has_system = false;
    for (const ChatMessage& m : messages) {
        if (m.role != "system" && m.role != "user" && m.role != "assistant")
            fail("chat: unknown role \"" + m.role + "\" (system, user or assistant)");
        has_system |= m.role == "system";
    }
    if (chatml && !has_system) out += "<|im_start|>system\n" + t.default_system + "<|im_end|>\n";
    for (size_t i = 0; i < messages.size(); i++) {
        const bool last = i + 1 == messages.size();
        if (chatml) render_chatml(out, t, messages[i], last);
        else render_tulu(out, t, messages[i], last);
        if (last && add_generation_prompt) out += chatml ? "<|im_start|>assistant\n" : "<|assistant|>\n";
    }
    return out;
}

std::vector<int> chat_stop_ids(const ChatTemplate& t, const Tokenizer& tok, std::vector<int> eos_ids) {
    for (const std::string& text : {t.eos_token, t.end_of_turn()}) {
        const std::vector<int> ids = text.empty() ? std::vector<int>{} : tok.encode(text);
        if (ids.size() == 1 && std::find(eos_ids.begin(), eos_ids.end(), ids[0]) == eos_ids.end())
            eos_ids.push_back(ids[0]);
    }
    return eos_ids;
}

void print_verbose_prompt(const std::string& text, const std::vector<int>& ids) {
    std::fprintf(stderr, "prompt (%zu tokens), as rendered:\n%s\nprompt ids: ", ids.size(), text.c_str());
    for (size_t i = 0; i < ids.size(); i++) std::fprintf(stderr, "%s%d", i ? "," : "", ids[i]);
    std::fprintf(stderr, "\n");
}

ChatSession::ChatSession(Engine& eng, const Tokenizer& tok, ChatTemplate t, ChatSettings s)
    : eng_(eng), tok_(tok), t_(std::move(t)), s_(std::move(s)) {
    reset();
}

void ChatSession::reset() {
    messages_.clear();
    if (!s_.system.empty()) messages_.push_back({"system", s_.system});
}

std::vector<int> ChatSession::new_tokens(const std::vector<int>& prompt) {
    const bool extends = eng_.n_past() == (int)cached_.size() && cached_.size() < prompt.size() &&
                         std::equal(cached_.begin(), cached_.end(), prompt.begin());
    if (!extends) {
        eng_.reset();
        cached_.clear();
    }
    reused_ = cached_.size();
    return std::vector<int>(prompt.begin() + cached_.size(), prompt.end());
}

std::string ChatSession::reply(const std::string& user_text, std::FILE* out) {
    messages_.push_back({"user", user_text});
    try {
        return generate_reply(out);
    } catch (...) {
        messages_.pop_back();   // the turn did not happen
        throw;
    }
}

std::string ChatSession::generate_reply(std::FILE* out) {
    const std::string text = render_chat(t_, messages_, true);
    const std::vector<int> prompt = tok_.encode(text);
    if (s_.verbose_prompt) print_verbose_prompt(text, prompt);
    const int room = eng_.max_seq() - (int)prompt.size();
    if (room < 1)
        fail("the conversation has " + std::to_string(prompt.size()) + " tokens and the context is " +
             std::to_string(eng_.max_seq()) + " (/reset starts over; -c sets the context)");
    std::vector<int> feed = new_tokens(prompt), generated;
    StreamDecoder stream(tok_, prompt);
    const std::vector<int>& stops = s_.stop_ids;
    const int limit = std::min(s_.max_new_tokens, room);
    for (int step = 0; step < limit; step++) {   // pipelined: the step after this one starts before its id is read
        const int id = eng_.forward_sample(feed, s_.sampling, step, s_.pipelined && step + 1 < limit);
        cached_.insert(cached_.end(), feed.begin(), feed.end());
        if (std::find(stops.begin(), stops.end(), id) != stops.end()) break;
        generated.push_back(id);
        std::fputs(stream.push(id).c_str(), out);
        std::fflush(out);
        feed = {id};
    }
    std::fputs((stream.flush() + "\n").c_str(), out);
    std::fflush(out);
    messages_.push_back({"assistant", tok_.decode(generated)});
    return messages_.back().content;
}

void chat_loop(ChatSession& chat, std::istream& in, bool prompt_marker) {
    std::string line;
    for (;;) {
        if (prompt_marker) {
            std::fputs("> ", stdout);
            std::fflush(stdout);
        }
        if (!std::getline(in, line)) {
            if (prompt_marker) std::fputs("\n", stdout);   // Ctrl-D left the cursor after "> "
            return;
        }
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line == "/exit" || line == "/quit") return;
        if (line == "/reset") chat.reset();
        else if (!line.empty()) {
            try {
                chat.reply(line, stdout);
            } catch (const Error& e) {
                std::fprintf(stderr, "error: %s\n", e.what());
            }
        }
    }
}

}  // namespace olmo
