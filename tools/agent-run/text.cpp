// Lossy UTF-8 for what enters JSON: the tokenizer's decoder, counted.
#include "tools/agent-run/text.hpp"

#include "libcommon/tokenizer/unicode.hpp"

namespace ca::agent_run {

bool is_valid_utf8(const std::string& text) { return tokenizer::is_valid_utf8(text); }

void make_valid_text(std::string& text) {
  if (!is_valid_utf8(text)) text = tokenizer::valid_utf8(text);
}

std::string valid_text(const std::string& text, int64_t* replaced) {
  int64_t n = 0;
  if (!is_valid_utf8(text)) {
    for (const auto& c : tokenizer::decode_utf8(text)) {
      const bool ok = c.cp <= 0x10FFFF && (c.cp < 0xD800 || c.cp > 0xDFFF) &&
                      tokenizer::encode_utf8(c.cp).size() == c.length;
      // A decoded U+FFFD of one byte is an invalid byte; a real U+FFFD in the text is 3 bytes.
      if (!ok || (c.cp == 0xFFFD && c.length == 1)) ++n;
    }
  }
  if (replaced) *replaced = n;
  return n == 0 ? text : tokenizer::valid_utf8(text);
}

std::string marked_text(const std::string& text, const std::string& what) {
  int64_t n = 0;
  std::string out = valid_text(text, &n);
  if (n > 0) {
    if (!out.empty() && out.back() != '\n') out += "\n";
    out += "[agent-run: " + std::to_string(n) + " byte sequence" + (n == 1 ? "" : "s") + " of " + what +
           " that are not valid UTF-8 are shown as U+FFFD]";
  }
  return out;
}

std::string cut_utf8(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  // Back off over continuation bytes (10xxxxxx) to the start of the sequence that was cut, at most 3.
  for (int k = 0; k < 3 && end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80; ++k) --end;
  return text.substr(0, end);
}

}  // namespace ca::agent_run
