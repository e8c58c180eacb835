// Adapter folders: checked before any request, named by their content.
#include "tools/agent-run/adapter.hpp"

#include <filesystem>

#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::agent_run {

namespace fs = std::filesystem;

AdapterRef read_adapter_ref(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError("'" + dir + "' is not a folder (an adapter folder holds adapter_config.json and adapter_model.safetensors)");
  const std::string config_path = (fs::path(dir) / "adapter_config.json").string();
  const std::string weights_path = (fs::path(dir) / "adapter_model.safetensors").string();
  if (!fs::exists(config_path, ec))
    throw InputError("'" + config_path + "': no such file: '" + dir + "' is not a LoRA adapter folder" +
                     (fs::exists(fs::path(dir) / "config.json", ec) ? " (it holds config.json: a full checkpoint, for --load-weights)" : ""));
  Json config;
  try {
    config = parse_json(read_file(config_path), config_path);
  } catch (const InputError& e) {
    throw InputError("'" + config_path + "': not JSON: " + e.what());
  }
  if (!config.is_object()) throw InputError("'" + config_path + "': not a JSON object");
  if (!config.contains("peft_type") || config["peft_type"] != "LORA")
    throw InputError("'" + config_path + "': peft_type must be \"LORA\", got " +
                     (config.contains("peft_type") ? config["peft_type"].dump() : std::string("nothing")));
  if (!config.contains("r") || !config["r"].is_number_integer() || config["r"].get<int64_t>() < 1)
    throw InputError("'" + config_path + "': r must be an integer >= 1, got " +
                     (config.contains("r") ? config["r"].dump() : std::string("nothing")));
  if (!fs::exists(weights_path, ec))
    throw InputError("'" + weights_path + "': no such file: '" + dir + "' is not a LoRA adapter folder" +
                     (fs::exists(fs::path(dir) / "adapter_model.bin", ec)
                          ? " (adapter_model.bin is a pickle: agent-run does not hand those to a server; save with safe_serialization)"
                          : ""));
  const SafetensorsHeader header = read_safetensors_header(weights_path);  // InputError naming the file
  if (header.tensors.empty()) throw InputError("'" + weights_path + "': holds no tensor");

  AdapterRef ref;
  ref.path = fs::absolute(fs::path(dir)).lexically_normal().string();
  while (ref.path.size() > 1 && ref.path.back() == '/') ref.path.pop_back();
  ref.id = content_id(Json{{"adapter_config.json", sha256_file_hex(config_path)},
                           {"adapter_model.safetensors", sha256_file_hex(weights_path)}});
  ref.name = kAdapterPrefix + ref.id;
  return ref;
}

}  // namespace ca::agent_run
