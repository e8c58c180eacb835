// Text that goes into a record or a request is valid UTF-8: what a model or a tool produced is made
// so lossily (U+FFFD, as the tokenizer's decode does) and the change is marked, never an exception.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ca::agent_run {

// `text` with every invalid, overlong or surrogate sequence replaced by U+FFFD; `replaced` gets how
// many sequences were.
std::string valid_text(const std::string& text, int64_t* replaced = nullptr);
// True when `text` is well-formed UTF-8 (no invalid, overlong or surrogate sequence), checked in
// place: nothing is allocated, however long the text.
bool is_valid_utf8(const std::string& text);
// valid_text in place: a valid text (the usual case) is neither copied nor changed.
void make_valid_text(std::string& text);
// valid_text, and when something was replaced a line saying so, naming `what` ("the output").
std::string marked_text(const std::string& text, const std::string& what);
// The longest prefix of at most `max_bytes` that does not end inside a UTF-8 sequence.
std::string cut_utf8(const std::string& text, std::size_t max_bytes);

}  // namespace ca::agent_run
