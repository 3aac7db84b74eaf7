// chat.h: chat templates and the conversation behind --chat.
//
// Instruct checkpoints ship a Jinja chat template (tokenizer_config.json's "chat_template", or
// chat_template.jinja) that turns a list of messages into the prompt the model was trained on.
// There is no Jinja engine here: the templates of OLMo-2 and OLMo-3 Instruct are recognized by
// their exact text and rendered in C++ (render_chat), to the same string transformers'
// apply_chat_template gives (tests/test_chat.cpp against tests/fixtures/chat_refs.json). Any
// other template is a one-line error that names the file.
//
// Two styles cover them:
//   tulu    (OLMo-2 Instruct):  [bos] <|system|>\nS\n <|user|>\nU\n <|assistant|>\nA eos \n ...
//   chatml  (OLMo-3):           <|im_start|>system\nS<|im_end|>\n <|im_start|>user\nU<|im_end|>\n
//                               <|im_start|>assistant\nA<|im_end|>\n ... (the last turn ends in eos)
// A ChatML template inserts a default system turn when the conversation has none, and may add a
// fixed text to a system message the user gives; both are data of the recognized template.
#pragma once
#include <cstdio>
#include <istream>
#include <string>
#include <vector>

#include "engine.h"
#include "tokenizer.h"

namespace olmo {

struct ChatMessage {
    std::string role;      // "system", "user" or "assistant"
    std::string content;
};

struct ChatTemplate {
    enum class Style { Tulu, ChatML };
    std::string name;             // which known template, for --verbose-prompt and errors
    Style style = Style::Tulu;
    bool bos_first = false;       // tulu: the prompt starts with bos_token
    std::string default_system;   // chatml: the system text when no message is a system message
    std::string system_suffix;    // chatml: appended to the content of a system message
    std::string bos_token, eos_token;   // the tokenizer's, from tokenizer_config.json
    // Text that ends an assistant turn before the next one: "<|im_end|>" (chatml) or eos (tulu).
    std::string end_of_turn() const { return style == Style::ChatML ? "<|im_end|>" : eos_token; }
};

// The template whose text (ignoring leading/trailing whitespace and \r) is `text`; an error
// naming `where` and the known templates otherwise.
ChatTemplate recognize_chat_template(const std::string& text, const std::string& where);

// The chat template of a model folder: DIR/chat_template.jinja when present (as transformers
// prefers it), else DIR/tokenizer_config.json's "chat_template" (a string, or a list of named
// templates: the one named "default"), with that file's bos_token and eos_token.
ChatTemplate load_chat_template(const std::string& dir);

// The prompt for `messages`, as apply_chat_template(messages, add_generation_prompt) renders it.
std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt);

// The ids a reply stops at: the model's eos ids plus the template's eos and end-of-turn tokens
// (each when the tokenizer encodes it as one id).
std::vector<int> chat_stop_ids(const ChatTemplate& t, const Tokenizer& tok, std::vector<int> eos_ids);

// --verbose-prompt: the prompt as rendered and its ids, on stderr.
void print_verbose_prompt(const std::string& text, const std::vector<int>& ids);

struct ChatSettings {
    std::string system;           // --system: the conversation's first message (none when empty)
    SamplingParams sampling;
    int max_new_tokens = 128;     // per reply
    bool verbose_prompt = false;
    std::vector<int> stop_ids;    // chat_stop_ids
    bool pipelined = true;        // each decode step started before the one ahead's id is read (--no-pipeline)
};

// A conversation on the engine's default sequence. Each reply renders the whole conversation
// again; when the ids already in the KV cache are a prefix of the new prompt (the usual case:
// the previous prompt and reply re-tokenize the same way), only the rest is prefilled, else the
// cache is cleared and the prompt prefilled whole.
class ChatSession {
public:
    ChatSession(Engine& eng, const Tokenizer& tok, ChatTemplate t, ChatSettings s);
    // Adds the user's message, streams the reply to `out` (then a newline) and keeps it.
    std::string reply(const std::string& user_text, std::FILE* out);
    void reset();                 // forget the conversation, keep --system
    void add(const ChatMessage& m) { messages_.push_back(m); }   // history, as if it had been said
    size_t reused() const { return reused_; }   // ids of the last prompt found in the KV cache
private:
    std::vector<int> new_tokens(const std::vector<int>& prompt);   // prompt less what the cache holds
    std::string generate_reply(std::FILE* out);                     // to the last message
    Engine& eng_;
    const Tokenizer& tok_;
    ChatTemplate t_;
    ChatSettings s_;
    std::vector<ChatMessage> messages_;
    std::vector<int> cached_;     // the ids in the engine's default sequence
    size_t reused_ = 0;
};

// Interactive chat: one user message per line of `in` until end of input (Ctrl-D) or /exit;
// empty lines are skipped, /reset starts over. With `prompt_marker` a "> " is printed before
// each line is read (on a terminal). A failed turn (a conversation that outgrew the context)
// prints its error and the chat goes on.
void chat_loop(ChatSession& chat, std::istream& in, bool prompt_marker);

}  // namespace olmo
