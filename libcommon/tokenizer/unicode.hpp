// The little Unicode a byte-level BPE pre-tokenizer needs: the letter (\p{L}), number (\p{N}) and
// white-space (\s) classes of its regex, over libcommon/utf8's decoding with byte offsets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "libcommon/utf8.hpp"

namespace ca::tokenizer {

struct CodepointRange {
  uint32_t lo, hi;
};
extern const CodepointRange kLetterRanges[];
extern const std::size_t kLetterRanges_count;
extern const CodepointRange kNumberRanges[];
extern const std::size_t kNumberRanges_count;

bool is_letter(uint32_t cp);
bool is_number(uint32_t cp);
bool is_whitespace(uint32_t cp);  // Unicode White_Space, as the regex engines' \s

// UTF-8 (libcommon/utf8.hpp), used here as the tokenizer always has.
using ca::Codepoint;
using ca::decode_utf8;
using ca::encode_utf8;
using ca::is_valid_utf8;
using ca::valid_utf8;

}  // namespace ca::tokenizer
