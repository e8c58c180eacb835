// Device memory shared between processes by CUDA IPC: the reference worker keeps inputs,
// references and params on the GPU and describes them (PROTOCOL.md, "Device tensors"); the runner
// describes its output buffers the same way. A reader maps a description's allocation, uses the
// bytes in place or copies them, and unmaps:
//
//   ca::cuda::IpcMaps maps;                                       // in the current context
//   for (auto& [name, t] : ca::cuda::shared_tensors(answer["tensors"]))
//     ex.upload_device(name, maps.map(t), t.bytes);               // device to device
//   maps.close();                                                 // before untrusted code runs
//
// A mapping exposes the whole allocation (the caching allocator's segment holds other tensors), so
// nothing untrusted may run while one is open.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::cuda {

struct SharedTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  size_t bytes = 0;
  std::string handle;  // hex of the 64-byte CUipcMemHandle; empty when bytes == 0
  size_t offset = 0;   // of the first byte within the allocation
  Json to_json() const;
};

// {"outputs.0": {"dtype","shape","bytes","handle","offset"}, ...}; throws FieldError naming
// `where`.<name>.<field> for a missing or mistyped field.
std::map<std::string, SharedTensor> shared_tensors(const Json& descriptions, const std::string& where = "tensors");
// The IPC handle (hex) of an allocation of this process, from its base address.
std::string export_handle(CUdeviceptr base);

// Open mappings in the current context, one per allocation (a handle may be opened only once per
// context), closed by close() or the destructor. Not thread-safe.
class IpcMaps {
 public:
  IpcMaps() = default;
  ~IpcMaps();
  IpcMaps(const IpcMaps&) = delete;
  IpcMaps& operator=(const IpcMaps&) = delete;
  // The address of the tensor's first byte (0 for an empty tensor). Throws CudaError.
  CUdeviceptr map(const SharedTensor& t);
  void close();
  size_t open_count() const { return open_.size(); }

 private:
  std::map<std::string, CUdeviceptr> open_;  // handle -> base
};

}  // namespace ca::cuda
