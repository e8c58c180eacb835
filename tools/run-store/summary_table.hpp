// Renders run-store summary rows as an aligned table for terminals.
#pragma once
#include <string>

#include "libcommon/jsonl.hpp"

namespace ca {
std::string render_summary_table(const Json& runs);
}
