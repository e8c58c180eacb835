// The character classes of the pre-tokenizer regexes (UTF-8 itself: libcommon/utf8).
#include "libcommon/tokenizer/unicode.hpp"

#include <algorithm>

namespace ca::tokenizer {

namespace {
bool in_ranges(const CodepointRange* r, std::size_t n, uint32_t cp) {
  const CodepointRange* end = r + n;
  const CodepointRange* it = std::upper_bound(r, end, cp, [](uint32_t v, const CodepointRange& x) { return v < x.lo; });
  return it != r && cp <= (it - 1)->hi;
}
}  // namespace

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(kLetterRanges, kLetterRanges_count, cp);
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(kNumberRanges, kNumberRanges_count, cp);
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace ca::tokenizer
