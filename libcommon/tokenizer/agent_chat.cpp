// The agent episode's token context in Qwen2.5's tool format (agent_chat.hpp).
#include "libcommon/tokenizer/agent_chat.hpp"

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"

namespace ca::tokenizer {

namespace {
std::string text_of(const Json& message) {
  if (!message.is_object() || !message.contains("content") || message["content"].is_null()) return "";
  return message["content"].is_string() ? message["content"].get<std::string>() : message["content"].dump();
}
}  // namespace

std::string tools_system_block(const Json& tools) {
  if (!tools.is_array() || tools.empty()) return "";
  std::string s =
      "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const auto& t : tools) s += "\n" + t.dump();
  s += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
       "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
       "<args-json-object>}\n</tool_call>";
  return s;
}

std::string assistant_text(const std::string& content, const std::vector<RenderedCall>& calls) {
  std::string s = content;
  for (const auto& c : calls) {
    if (!s.empty()) s += "\n";
    s += "<tool_call>\n";
    if (c.name.empty()) {
      s += c.arguments;  // a malformed block: the model's own text between the tags
    } else {
      // The arguments as the model wrote them when they are JSON (so the bytes are the model's); any
      // other text as a JSON string, which the parser reads back as that text.
      const std::string args = Json::accept(c.arguments) ? c.arguments : Json(c.arguments).dump();
      s += "{\"name\": " + Json(c.name).dump() + ", \"arguments\": " + args + "}";
    }
    s += "\n</tool_call>";
  }
  return s;
}

ChatContext::ChatContext(const Tokenizer& tok) : tok_(tok), im_end_(tok.token_id("<|im_end|>")) {
  if (im_end_ < 0) throw InputError("the tokenizer has no <|im_end|> token: the ChatML template needs it");
}

std::vector<int> ChatContext::prompt(const Json& messages, const Json& tools) {
  if (!messages.is_array() || messages.size() <= seen_) throw InputError("chat context: no new message to answer");
  std::vector<ChatMessage> fresh;
  ChatTemplateOptions o;
  o.add_generation_prompt = true;
  if (seen_ == 0) {
    // The first prompt: the system message with the tool signatures, then the rest.
    for (std::size_t i = 0; i < messages.size(); ++i) {
      std::string role = messages[i].value("role", "user");
      std::string content = text_of(messages[i]);
      if (i == 0 && role == "system") content += tools_system_block(tools);
      fresh.push_back({role, content});
    }
    if (fresh.empty() || fresh[0].role != "system") o.default_system += tools_system_block(tools);
  } else {
    // messages[seen_ - 1] is the last completion, already in the context as sampled.
    for (std::size_t i = seen_; i < messages.size(); ++i)
      fresh.push_back({messages[i].value("role", "user"), text_of(messages[i])});
    o.default_system.clear();
  }
  std::vector<int> ids;
  if (open_turn_) {
    // Close the last turn as the template writes it: <|im_end|> (unless sampled) and a newline.
    if (context_.empty() || context_.back() != im_end_) ids.push_back(im_end_);
    auto nl = tok_.encode("\n");
    ids.insert(ids.end(), nl.begin(), nl.end());
  }
  auto rendered = tok_.encode(chatml(fresh, o));
  ids.insert(ids.end(), rendered.begin(), rendered.end());
  context_.insert(context_.end(), ids.begin(), ids.end());
  seen_ = messages.size() + 1;  // the completion that follows is the next message
  return ids;
}

void ChatContext::complete(const std::vector<int>& ids) {
  context_.insert(context_.end(), ids.begin(), ids.end());
  open_turn_ = true;
}

std::vector<int> ChatContext::assistant_ids(const std::string& content, const std::vector<RenderedCall>& calls,
                                            bool stopped_for_length) const {
  std::vector<int> ids = tok_.encode(assistant_text(content, calls));
  if (!stopped_for_length) ids.push_back(im_end_);
  return ids;
}

namespace {
const Json& field(const Json& j, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw FieldError(where + "." + key, "missing");
  return j[key];
}
std::string string_field(const Json& j, const std::string& key, const std::string& where) {
  const Json& v = field(j, key, where);
  if (!v.is_string()) throw FieldError(where + "." + key, "expected a string");
  return v.get<std::string>();
}
}  // namespace

RenderedEpisode render_episode(const Tokenizer& tok, const Json& episode) {
  const Json& prompt = field(episode, "prompt", "episode");
  const Json& turns = field(episode, "turns", "episode");
  if (!turns.is_array()) throw FieldError("episode.turns", "expected an array");
  const Json tools = episode.contains("tools") ? episode["tools"] : Json::array();
  Json messages = Json::array({{{"role", "system"}, {"content", string_field(prompt, "system", "episode.prompt")}},
                               {{"role", "user"}, {"content", string_field(prompt, "user", "episode.prompt")}}});
  ChatContext ctx(tok);
  RenderedEpisode out;
  std::size_t answered = 0;  // messages up to the last assistant turn
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const std::string where = "episode.turns[" + std::to_string(i) + "]";
    const Json& a = field(turns[i], "assistant", where);
    if (!a.is_object()) throw FieldError(where + ".assistant", std::string("expected an object, got ") + a.type_name());
    const bool cut = get_optional<std::string>(a, "/finish_reason", where + ".assistant.finish_reason") == "length";
    std::string content = a.contains("content") && a["content"].is_string() ? a["content"].get<std::string>() : "";
    std::vector<RenderedCall> calls;
    if (a.contains("tool_calls") && !a["tool_calls"].is_null()) {
      if (!a["tool_calls"].is_array()) throw FieldError(where + ".assistant.tool_calls", "expected an array");
      for (std::size_t k = 0; k < a["tool_calls"].size(); ++k) {
        const Json& c = a["tool_calls"][k];
        const std::string cw = where + ".assistant.tool_calls[" + std::to_string(k) + "]";
        RenderedCall rc;
        rc.name = c.contains("name") && c["name"].is_string() ? c["name"].get<std::string>() : "";
        const Json& args = field(c, "arguments", cw);
        rc.arguments = args.is_string() ? args.get<std::string>() : args.dump();
        calls.push_back(rc);
      }
    }
    if (i > 0 && messages.size() == answered)
      throw FieldError(where, "follows a turn that has no tool results (nothing for this turn to answer)");
    auto fed = ctx.prompt(messages, tools);
    out.tokens.insert(out.tokens.end(), fed.begin(), fed.end());
    out.mask.insert(out.mask.end(), fed.size(), 0.0);
    auto sampled = ctx.assistant_ids(content, calls, cut);
    if (out.response_start < 0 && !sampled.empty()) out.response_start = int(out.tokens.size());
    ctx.complete(sampled);
    out.tokens.insert(out.tokens.end(), sampled.begin(), sampled.end());
    out.mask.insert(out.mask.end(), sampled.size(), 1.0);
    messages.push_back({{"role", "assistant"}, {"content", content}});
    answered = messages.size();
    if (turns[i].contains("tool_results") && turns[i]["tool_results"].is_array())
      for (const auto& r : turns[i]["tool_results"])
        messages.push_back({{"role", "tool"}, {"content", text_of(r)}});
  }
  return out;
}

}  // namespace ca::tokenizer
