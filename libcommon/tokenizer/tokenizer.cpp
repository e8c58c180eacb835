// Byte-level BPE from tokenizer.json: added tokens, the pre-tokenizer regex (hand-coded, as its
// alternatives are few), the GPT-2 byte-to-unicode map, and merges by rank.
#include "libcommon/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <climits>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/tokenizer/unicode.hpp"

namespace ca::tokenizer {

namespace {
// The pre-tokenizer regexes we implement, as tokenizer.json spells them.
const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool is_newline(uint32_t c) { return c == '\r' || c == '\n'; }
uint32_t lower(uint32_t c) { return c < 0x80 ? (c | 0x20) : c; }
bool is_other(uint32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }  // [^\s\p{L}\p{N}]

// Length (in code points) of the contraction 's 't 're 've 'm 'll 'd at i, or 0.
std::size_t contraction(const std::vector<Codepoint>& c, std::size_t i, bool case_insensitive) {
  if (c[i].cp != '\'' || i + 1 >= c.size()) return 0;
  auto at = [&](std::size_t k) -> uint32_t {
    if (i + k >= c.size()) return 0;
    return case_insensitive ? lower(c[i + k].cp) : c[i + k].cp;
  };
  uint32_t a = at(1), b = at(2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// White-space alternatives shared by every pattern: \s+(?!\S) then \s+ (and, first, \s*[\r\n]+ for
// the newer patterns). Returns the end of the match at i (i is white space).
std::size_t whitespace_match(const std::vector<Codepoint>& c, std::size_t i, bool newline_alternative) {
  std::size_t e = i;
  while (e < c.size() && is_whitespace(c[e].cp)) ++e;
  if (newline_alternative) {  // \s*[\r\n]+ : up to and including the last newline of the run
    std::size_t last = e;
    for (std::size_t p = i; p < e; ++p)
      if (is_newline(c[p].cp)) last = p;
    if (last != e) return last + 1;
  }
  if (e == c.size()) return e;  // \s+(?!\S) at the end of the text
  if (e - 1 > i) return e - 1;  // \s+(?!\S): leave the last space to the next word
  return e;                     // \s+
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Loading

Tokenizer Tokenizer::from_file(const std::string& path) {
  // Sorted maps: a vocabulary of 150,000 keys parses in n log n, not n^2; nesting is limited as in
  // every JSON text a tool reads (a hostile file nested 100,000 deep is bad input, not a crash).
  const nlohmann::json j = parse_json_sorted(read_file(path), "'" + path + "'");
  return from_json(j, path);
}

namespace {

InputError tokenizer_error(const std::string& origin, const std::string& why) { return InputError("'" + origin + "': " + why); }

// Ids read at full width and bounded before they size id_to_token_: a negative id wrote out of
// bounds, 2^32 wrapped to 0 through get<int>(). kMaxTokenId is far above any real vocabulary (~262k).
int checked_token_id(const std::string& origin, const nlohmann::json& id, const std::string& key) {
  constexpr int64_t kMaxTokenId = int64_t(1) << 22;
  if (!id.is_number_integer()) throw tokenizer_error(origin, key + " is not an integer id");
  if ((!id.is_number_unsigned() && id.get<int64_t>() < 0) || id.get<uint64_t>() >= uint64_t(kMaxTokenId))
    throw tokenizer_error(origin, key + " is " + id.dump() + ", outside 0.." + std::to_string(kMaxTokenId - 1));
  return id.get<int>();
}

}  // namespace

Tokenizer Tokenizer::from_json(const nlohmann::json& j, const std::string& origin) {
  auto bad = [&](const std::string& why) { return tokenizer_error(origin, why); };
  Tokenizer t;
  // GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest shift to U+0100...
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t.byte_to_unicode_[b] = encode_utf8(printable ? uint32_t(b) : uint32_t(256 + n++));
    t.unicode_to_byte_[t.byte_to_unicode_[b]] = static_cast<unsigned char>(b);
  }
  if (!j.contains("model") || !j["model"].is_object()) throw bad("no 'model'");
  const nlohmann::json& m = j["model"];
  const std::string where = "'" + origin + "'";
  const std::string type = get_setting<std::string>(m, "/type", "BPE", where + ": model");
  if (type != "BPE") throw bad("model type '" + type + "' is not BPE");
  if (!m.contains("vocab") || !m["vocab"].is_object()) throw bad("model.vocab missing");
  t.ignore_merges_ = get_setting(m, "/ignore_merges", false, where + ": model");
  int max_id = t.read_vocab_and_merges(m, origin);
  max_id = t.read_added_tokens(j, origin, max_id);
  // Longest first, so "<|im_start|>" wins over a shorter token that is its prefix.
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  t.id_to_token_.assign(max_id + 1, std::string());
  for (auto& [tok, id] : t.vocab_) t.id_to_token_[id] = tok;
  for (auto& a : t.added_) t.id_to_token_[a.id] = a.content;

  t.read_pre_tokenizer(j, origin);
  if (j.contains("normalizer") && j["normalizer"].is_object()) {
    const std::string type = get_setting<std::string>(j["normalizer"], "/type", "", where + ": normalizer");
    if (type != "NFC") throw bad("normalizer '" + type + "' is not supported (none or NFC)");
  }
  return t;
}

// model.vocab (ids checked) and model.merges; returns the largest id.
int Tokenizer::read_vocab_and_merges(const nlohmann::json& m, const std::string& origin) {
  int max_id = -1;
  for (auto& [tok, id] : m["vocab"].items()) {
    const int v = checked_token_id(origin, id, "model.vocab['" + tok + "']");
    vocab_[tok] = v;
    max_id = std::max(max_id, v);
  }
  if (m.contains("merges") && m["merges"].is_array()) {
    int rank = 0;
    for (auto& mg : m["merges"]) {
      std::string key;
      if (mg.is_string()) {
        key = mg.get<std::string>();
      } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        key = mg[0].get<std::string>() + " " + mg[1].get<std::string>();
      } else {
        throw tokenizer_error(origin, "model.merges entry " + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
      }
      merge_rank_.emplace(key, rank++);
    }
  }
  return max_id;
}

// added_tokens (ids checked); returns the largest id, max_id included.
int Tokenizer::read_added_tokens(const nlohmann::json& j, const std::string& origin, int max_id) {
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (std::size_t k = 0; k < j["added_tokens"].size(); ++k) {
      const auto& a = j["added_tokens"][k];
      const std::string key = "added_tokens[" + std::to_string(k) + "]";
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
        throw tokenizer_error(origin, key + " needs a string 'content' and an integer 'id'");
      Added ad{a["content"].get<std::string>(), checked_token_id(origin, a["id"], key + ".id"),
               a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>()};
      added_.push_back(ad);
      max_id = std::max(max_id, ad.id);
    }
  return max_id;
}

// The pre-tokenizer: ByteLevel (with its own GPT-2 regex) or Sequence[Split(regex), ByteLevel].
void Tokenizer::read_pre_tokenizer(const nlohmann::json& j, const std::string& origin) {
  const std::string where = "'" + origin + "': pre_tokenizer";
  const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
  if (!pre.is_null() && !pre.is_object()) throw tokenizer_error(origin, "pre_tokenizer is not an object");
  std::vector<nlohmann::json> steps;
  if (pre.is_object() && get_setting<std::string>(pre, "/type", "", where) == "Sequence") {
    if (!pre.contains("pretokenizers") || !pre["pretokenizers"].is_array())
      throw tokenizer_error(origin, "pre_tokenizer.pretokenizers is not a list");
    steps.assign(pre["pretokenizers"].begin(), pre["pretokenizers"].end());
  } else if (pre.is_object()) {
    steps.push_back(pre);
  }
  bool have_split = false, have_bytelevel = false;
  for (auto& s : steps) {
    if (!s.is_object()) throw tokenizer_error(origin, "a pre-tokenizer step is not an object: " + s.dump().substr(0, 40));
    const std::string type = get_setting<std::string>(s, "/type", "", where);
    if (type == "Split") {
      const std::string pattern = get_setting<std::string>(s, "/pattern/Regex", "", where + " (Split)");
      if (pattern == kQwen2Pattern)
        split_ = Split::Qwen2;
      else if (pattern == kLlama3Pattern)
        split_ = Split::Llama3;
      else if (pattern == kGpt2Pattern)
        split_ = Split::Gpt2;
      else
        throw tokenizer_error(origin, "pre-tokenizer regex is not one the native tokenizer knows (Qwen2, Llama-3, GPT-2): " + pattern);
      have_split = true;
    } else if (type == "ByteLevel") {
      have_bytelevel = true;
      add_prefix_space_ = get_setting(s, "/add_prefix_space", false, where + " (ByteLevel)");
      if (!have_split && get_setting(s, "/use_regex", true, where + " (ByteLevel)")) {
        split_ = Split::Gpt2;
        have_split = true;
      }
    } else {
      throw tokenizer_error(origin, "pre-tokenizer '" + type + "' is not supported (ByteLevel, Split)");
    }
  }
  if (!have_bytelevel) throw tokenizer_error(origin, "not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer)");
  if (!have_split) throw tokenizer_error(origin, "the ByteLevel pre-tokenizer has no regex to split with");
}

int Tokenizer::token_id(const std::string& token) const {
  for (auto& a : added_)
    if (a.content == token) return a.id;
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string& Tokenizer::token(int id) const {
  if (id < 0 || id >= int(id_to_token_.size())) throw InputError("token id " + std::to_string(id) + " is outside the vocabulary");
  return id_to_token_[id];
}

bool Tokenizer::is_special(int id) const {
  for (auto& a : added_)
    if (a.id == id) return a.special;
  return false;
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer

std::vector<std::size_t> Tokenizer::split_points(const std::string& text) const {
  const std::vector<Codepoint> c = decode_utf8(text);
  std::vector<std::size_t> ends;  // byte offsets where pieces end
  std::size_t i = 0;
  const bool modern = split_ != Split::Gpt2;
  const std::size_t max_digits = split_ == Split::Qwen2 ? 1 : split_ == Split::Llama3 ? 3 : SIZE_MAX;
  while (i < c.size()) {
    std::size_t e = i;
    const uint32_t cp = c[i].cp;
    auto next = [&](std::size_t k) -> uint32_t { return k < c.size() ? c[k].cp : 0; };
    auto has = [&](std::size_t k) { return k < c.size(); };
    if (std::size_t n = contraction(c, i, modern)) {
      e = i + n;
    } else if (modern) {
      if (is_letter(cp) || (!is_newline(cp) && !is_letter(cp) && !is_number(cp) && has(i + 1) && is_letter(next(i + 1)))) {
        e = i + 1;  // [^\r\n\p{L}\p{N}]?\p{L}+
        while (e < c.size() && is_letter(c[e].cp)) ++e;
      } else if (is_number(cp)) {
        e = i;
        while (e < c.size() && e - i < max_digits && is_number(c[e].cp)) ++e;
      } else if (is_other(cp) || (cp == ' ' && has(i + 1) && is_other(next(i + 1)))) {
        e = cp == ' ' ? i + 1 : i;  //  ?[^\s\p{L}\p{N}]+[\r\n]*
        while (e < c.size() && is_other(c[e].cp)) ++e;
        while (e < c.size() && is_newline(c[e].cp)) ++e;
      } else {
        e = whitespace_match(c, i, true);
      }
    } else {
      std::size_t j = cp == ' ' && has(i + 1) ? i + 1 : i;  // the optional leading space
      const uint32_t d = c[j].cp;
      if (is_letter(d)) {
        e = j;
        while (e < c.size() && is_letter(c[e].cp)) ++e;
      } else if (is_number(d)) {
        e = j;
        while (e < c.size() && is_number(c[e].cp)) ++e;
      } else if (is_other(d)) {
        e = j;
        while (e < c.size() && is_other(c[e].cp)) ++e;
      } else {
        e = whitespace_match(c, i, false);
      }
    }
    if (e <= i) e = i + 1;  // cannot happen with these patterns; never loop forever
    i = e;
    ends.push_back(i < c.size() ? c[i].offset : text.size());
  }
  return ends;
}

std::vector<std::string> Tokenizer::pre_tokenize(const std::string& text) const {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t end : split_points(text)) {
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// BPE

std::vector<int> Tokenizer::bpe(const std::string& piece) const {
  std::string mapped;
  std::vector<std::string> sym;
  for (unsigned char b : piece) {
    sym.push_back(byte_to_unicode_[b]);
    mapped += byte_to_unicode_[b];
  }
  if (ignore_merges_)
    if (auto it = vocab_.find(mapped); it != vocab_.end()) return {it->second};
  // Merge the adjacent pair of lowest rank (leftmost on ties) until no pair is a merge.
  while (sym.size() > 1) {
    int best = INT_MAX;
    std::size_t at = 0;
    for (std::size_t k = 0; k + 1 < sym.size(); ++k) {
      auto it = merge_rank_.find(sym[k] + " " + sym[k + 1]);
      if (it != merge_rank_.end() && it->second < best) best = it->second, at = k;
    }
    if (best == INT_MAX) break;
    const std::string left = sym[at], right = sym[at + 1];
    std::vector<std::string> merged;
    merged.reserve(sym.size());
    for (std::size_t k = 0; k < sym.size(); ++k) {
      if (k + 1 < sym.size() && sym[k] == left && sym[k + 1] == right) {
        merged.push_back(left + right);
        ++k;
      } else {
        merged.push_back(sym[k]);
      }
    }
    sym = std::move(merged);
  }
  std::vector<int> ids;
  for (auto& s : sym) {
    auto it = vocab_.find(s);
    if (it == vocab_.end()) throw InputError("tokenizer: symbol '" + s + "' is not in the vocabulary (incomplete byte-level vocab)");
    ids.push_back(it->second);
  }
  return ids;
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  auto encode_plain = [&](const std::string& part) {
    if (part.empty()) return;
    std::string s = part;
    if (add_prefix_space_ && s[0] != ' ') s = " " + s;
    std::size_t start = 0;
    for (std::size_t end : split_points(s)) {
      auto piece = bpe(s.substr(start, end - start));
      ids.insert(ids.end(), piece.begin(), piece.end());
      start = end;
    }
  };
  std::size_t pos = 0, plain = 0;
  while (pos < text.size()) {
    const Added* hit = nullptr;
    if (!added_.empty())
      for (auto& a : added_)
        if (!a.content.empty() && text.compare(pos, a.content.size(), a.content) == 0) {
          hit = &a;  // longest first
          break;
        }
    if (hit) {
      encode_plain(text.substr(plain, pos - plain));
      ids.push_back(hit->id);
      pos += hit->content.size();
      plain = pos;
    } else {
      ++pos;
    }
  }
  encode_plain(text.substr(plain));
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
  std::string out;
  for (int id : ids) {
    const std::string& tok = token(id);
    bool added = false;
    for (auto& a : added_)
      if (a.id == id) {
        added = true;
        if (!(skip_special && a.special)) out += a.content;
        break;
      }
    if (added) continue;
    for (auto& c : decode_utf8(tok)) {
      auto it = unicode_to_byte_.find(tok.substr(c.offset, c.length));
      if (it != unicode_to_byte_.end())
        out += char(it->second);
      else
        out += tok.substr(c.offset, c.length);  // not a byte-level symbol: keep as is
    }
  }
  return valid_utf8(out);
}

// ---------------------------------------------------------------------------------------------
// ChatML

std::string chatml(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) {
  std::string out;
  if ((messages.empty() || messages[0].role != "system") && !options.default_system.empty())
    out += "<|im_start|>system\n" + options.default_system + "<|im_end|>\n";
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    } else if (m.role == "system" || m.role == "user" || m.role == "assistant") {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else {
      throw InputError("chat template: role '" + m.role + "' is not system, user, assistant or tool");
    }
  }
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace ca::tokenizer
