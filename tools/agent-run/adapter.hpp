// A LoRA adapter folder (PEFT's format: adapter_config.json + adapter_model.safetensors) as agent-run
// names it to a server and in the episode records: its absolute path and a name derived from its
// content, so an adapter rewritten in place gets a new name and a server that still holds the old one
// cannot be mistaken for serving the new one.
#pragma once
#include <string>

#include "libcommon/jsonl.hpp"

namespace ca::agent_run {

struct AdapterRef {
  std::string path;  // absolute: a server resolves it against its own working folder
  std::string id;    // 16 hex digits: content_id over the sha256 of the two files
  std::string name;  // kAdapterPrefix + id: the name the server loads it under
  Json to_json() const { return {{"name", name}, {"path", path}, {"id", id}}; }
};

// The prefix of the names agent-run gives adapters: adapters of another name on a server are never
// unloaded by agent-run.
inline constexpr const char* kAdapterPrefix = "ca-lora-";

// Reads DIR as an adapter folder before any request: adapter_config.json must be a JSON object with
// peft_type "LORA" and an integer r >= 1, adapter_model.safetensors a safetensors file with at least one
// tensor; otherwise InputError (exit 2) naming the file and what is wrong with it.
AdapterRef read_adapter_ref(const std::string& dir);

}  // namespace ca::agent_run
