// Text that goes into a record or a request is valid UTF-8: what a model or a tool produced is made
// so lossily (U+FFFD, as the tokenizer's decode does) and the change is marked, never an exception.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ca::agent {

// `text` with every invalid, overlong or surrogate sequence replaced by U+FFFD; `replaced` gets how
// many sequences were.
std::string valid_text(const std::string& text, int64_t* replaced = nullptr);
// valid_text, and when something was replaced a line saying so, naming `what` ("the output").
std::string marked_text(const std::string& text, const std::string& what);
// The longest prefix of at most `max_bytes` that does not end inside a UTF-8 sequence.
std::string cut_utf8(const std::string& text, std::size_t max_bytes);

}  // namespace ca::agent
