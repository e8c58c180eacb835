// Content ids: sha256 over canonical JSON (sorted keys, no spaces), so reruns get the same keys.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "libcommon/jsonl.hpp"

namespace ca {

std::string sha256_hex(std::string_view bytes);
// sha256 of a regular file's bytes, read in blocks; throws InputError naming the file when it cannot
// be opened or read or is not a regular file (a FIFO would block).
std::string sha256_file_hex(const std::string& path);
// Canonical text: keys sorted, compact separators, UTF-8 as is.
std::string canonical_json(const Json& value);
// 16 hex digits (64 bits) of sha256(canonical_json): short enough to read, far from collisions at
// the scale of millions of records.
std::string content_id(const Json& value);

// The task id: the hash of what defines the task (its code and init inputs / input specs when given,
// and its reference's mode when that is eval: an eval task is another task than the train one with
// the same code, so a verdict on one is never taken for the other; train, the default, keeps the ids
// of records that do not state it).
std::string task_id_for(const Json& task);
// The candidate id: the hash of the bundle (kernels and plan) together with its task id.
std::string candidate_id_for(const std::string& task_id, const Json& bundle);

// A seed nobody can predict (the OS's entropy), below 2^53 so every JSON reader keeps it exact:
// what a tool draws when --seed is not given, and records so the run can be reproduced.
// splitmix64: a well-mixed 64-bit value from a counter or a combination of seeds (the judges'
// seed streams).
uint64_t splitmix64(uint64_t x);
uint64_t unpredictable_seed();

}  // namespace ca
