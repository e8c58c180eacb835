// UTF-8 with byte offsets, and its validation: what the record layer needs to write only valid JSON
// text (jsonl.cpp) and the tokenizer to split text (tokenizer/unicode.hpp). Part of the core: imports
// run one way, the tokenizer uses it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ca {

// One code point and where its bytes are in the text. An invalid byte is one code point U+FFFD of
// one byte, so every byte of the text belongs to exactly one entry.
struct Codepoint {
  uint32_t cp;
  std::size_t offset, length;
};
std::vector<Codepoint> decode_utf8(const std::string& text);
std::string encode_utf8(uint32_t cp);
// The text with every invalid, overlong or surrogate sequence replaced by U+FFFD, as a lossy UTF-8
// decoder does: byte tokens need not end on a character boundary.
std::string valid_utf8(const std::string& text);
// True when valid_utf8(text) == text: no invalid, overlong or surrogate sequence. Checked in place,
// nothing allocated, so a valid text (the usual case) need not be copied to be made valid.
bool is_valid_utf8(const std::string& text);

}  // namespace ca
