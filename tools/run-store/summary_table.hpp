// Renders run-store summary rows as an aligned table for terminals.
#pragma once
#include <string>

#include "libcommon/jsonl.hpp"

namespace ca::run_store {
std::string render_summary_table(const Json& runs);
// Text from a store made safe for a terminal: C0 controls and DEL as \xNN, C1 controls (U+0080..U+009F)
// as \u00NN, bytes that are not UTF-8 as \xNN; everything else unchanged. Task data is untrusted:
// an escape sequence in a level or run name must not reach the terminal as one.
std::string terminal_safe(const std::string& text);
}  // namespace ca::run_store
