// Streaming checkpoints: the mapped reader, the sharded parallel writer and the streamed random init.
#include "libcommon/nn/checkpoint.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "libcommon/atomic_file.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"

namespace ca::nn {

namespace {
namespace fs = std::filesystem;

const char* kIndexName = "model.safetensors.index.json";

int thread_count(int asked, std::size_t jobs) {
  int n = asked > 0 ? asked : int(std::min(16u, std::max(1u, std::thread::hardware_concurrency())));
  return int(std::max<std::size_t>(1, std::min<std::size_t>(std::size_t(n), jobs)));
}

// Runs body(worker) on n threads; the first exception is rethrown after every thread has stopped.
// `stop` is set as soon as one fails, for the others to notice.
void run_threads(int n, std::atomic<bool>& stop, const std::function<void(int)>& body) {
  std::exception_ptr first;
  std::mutex m;
  auto guarded = [&](int w) {
    try {
      body(w);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!first) first = std::current_exception();
      stop = true;
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < n; ++w) threads.emplace_back(guarded, w);
  guarded(0);
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

bool is_float_dtype(const std::string& d) { return d == "F32" || d == "F64" || d == "BF16" || d == "F16"; }

uint64_t numel_of(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (auto d : shape)
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) throw InputError("shape " + Json(shape).dump() + " is too large");
  return n;
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// dtypes

std::string disk_dtype_for(const std::string& torch_dtype) {
  if (torch_dtype == "float32" || torch_dtype == "float") return "F32";
  if (torch_dtype == "bfloat16") return "BF16";
  if (torch_dtype == "float16" || torch_dtype == "half") return "F16";
  throw InputError("torch_dtype '" + torch_dtype + "' is not one a checkpoint is written in (float32, bfloat16, float16)");
}

std::string torch_dtype_for(const std::string& disk_dtype) {
  if (disk_dtype == "F32") return "float32";
  if (disk_dtype == "BF16") return "bfloat16";
  if (disk_dtype == "F16") return "float16";
  throw InputError("dtype " + disk_dtype + " is not one a checkpoint is written in (F32, BF16, F16)");
}

std::string checkpoint_disk_dtype(const std::string& dir) {
  const std::string path = dir + "/config.json";
  Json j;
  try {
    j = parse_json(read_file(path), "'" + path + "'");
  } catch (const Json::exception& e) {
    throw InputError("'" + path + "': " + e.what());
  }
  if (!j.is_object() || !j.contains("torch_dtype") || j["torch_dtype"].is_null()) return "F32";
  if (!j["torch_dtype"].is_string()) throw InputError("'" + path + "': torch_dtype must be a string");
  try {
    return disk_dtype_for(j["torch_dtype"].get<std::string>());
  } catch (const InputError& e) {
    throw InputError("'" + path + "': " + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// Reader

struct CheckpointReader::Entry {
  TensorInfo info;
  std::size_t file = 0;
  uint64_t offset = 0;  // where the tensor's bytes start in the file
};

CheckpointReader::~CheckpointReader() = default;

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir), entries_(std::make_unique<std::map<std::string, Entry>>()) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError("checkpoint '" + dir + "' is not a folder (config.json + model.safetensors)");
  std::vector<std::string> on_disk;  // *.safetensors names in the folder
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().extension() == ".safetensors") on_disk.push_back(it->path().filename().string());
  if (ec) throw InputError("cannot list checkpoint '" + dir + "': " + ec.message());
  std::sort(on_disk.begin(), on_disk.end());

  const std::string index_path = dir + "/" + kIndexName;
  std::map<std::string, std::string> weight_map;  // tensor -> file name, when there is an index
  std::vector<std::string> names;                 // the files to read
  const bool indexed = fs::exists(fs::symlink_status(index_path, ec));
  if (indexed) {
    Json idx;
    try {
      idx = parse_json(read_file(index_path), "'" + index_path + "'");
    } catch (const Json::exception& e) {
      throw InputError("'" + index_path + "': " + e.what());
    }
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      throw InputError("'" + index_path + "': no weight_map object");
    std::set<std::string> seen;
    for (auto& [tensor, file] : idx["weight_map"].items()) {
      if (!file.is_string()) throw InputError("'" + index_path + "': weight_map['" + tensor + "'] is not a string");
      const std::string f = file.get<std::string>();
      // A plain name of a file in this folder: no separator, no '..', nothing hidden, a .safetensors.
      const bool plain = !f.empty() && f.find('/') == std::string::npos && f.find('\\') == std::string::npos &&
                         f.find('\0') == std::string::npos && f[0] != '.' && f.size() > 12 &&
                         f.compare(f.size() - 12, 12, ".safetensors") == 0;
      if (!plain)
        throw InputError("'" + index_path + "': weight_map['" + tensor + "'] is '" + f +
                         "', not the name of a .safetensors file in the checkpoint's folder");
      weight_map[tensor] = f;
      if (seen.insert(f).second) names.push_back(f);
    }
    if (names.empty()) throw InputError("'" + index_path + "': the weight_map is empty");
    std::sort(names.begin(), names.end());
    for (auto& f : on_disk)
      if (!seen.count(f))
        throw InputError("checkpoint '" + dir + "': '" + f + "' is not named in '" + index_path +
                         "' (a stale weight file? remove the one that is not part of this checkpoint)");
  } else {
    names = on_disk;
    if (names.empty()) throw InputError("checkpoint '" + dir + "' has no .safetensors file");
  }

  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string path = dir + "/" + names[i];
    try {
      maps_.push_back(std::make_unique<MappedFile>(path));
    } catch (const InputError& e) {
      if (indexed) throw InputError("'" + index_path + "' names '" + names[i] + "': " + e.what());
      throw;
    }
    file_paths_.push_back(path);
    SafetensorsHeader h = parse_safetensors_header(maps_.back()->data(), maps_.back()->size(), path);
    for (auto& [name, info] : h.tensors) {
      if (indexed) {
        auto w = weight_map.find(name);
        if (w == weight_map.end())
          throw InputError("'" + path + "': tensor '" + name + "' is not in '" + index_path + "'");
        if (w->second != names[i])
          throw InputError("checkpoint '" + dir + "': tensor '" + name + "' is in '" + path + "', but '" + index_path +
                           "' places it in '" + w->second + "' (a tensor in two shards?)");
      }
      Entry e{info, i, h.data_start + info.begin};
      auto [it, fresh] = entries_->emplace(name, e);
      if (!fresh)
        throw InputError("checkpoint '" + dir + "': tensor '" + name + "' is in both '" + file_paths_[it->second.file] +
                         "' and '" + path + "' (a stale weight file? remove the one that is not part of this checkpoint)");
    }
  }
  for (auto& [tensor, file] : weight_map)
    if (!entries_->count(tensor))
      throw InputError("'" + index_path + "' places tensor '" + tensor + "' in '" + file + "', which does not hold it");
}

bool CheckpointReader::has(const std::string& name) const { return entries_->count(name) > 0; }

const CheckpointReader::Entry& CheckpointReader::entry(const std::string& name) const {
  auto it = entries_->find(name);
  if (it == entries_->end()) throw InternalError("checkpoint '" + dir_ + "': no tensor '" + name + "'");
  return it->second;
}

const TensorInfo& CheckpointReader::info(const std::string& name) const { return entry(name).info; }
const std::string& CheckpointReader::file_of(const std::string& name) const { return file_paths_[entry(name).file]; }

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (auto& [name, e] : *entries_) out.push_back(name);
  return out;
}

const uint8_t* CheckpointReader::raw(const std::string& name) const {
  const Entry& e = entry(name);
  return maps_[e.file]->data() + e.offset;
}

void CheckpointReader::check_layout(const Config& config, const std::string& config_path,
                                    const std::set<std::string>& may_be_missing) const {
  for_each_param(config, [&](const std::string& name, const std::vector<int64_t>& shape) {
    auto it = entries_->find(name);
    if (it == entries_->end()) {
      if (may_be_missing.count(name)) return true;
      throw InputError("checkpoint '" + dir_ + "': tensor '" + name + "' is missing ('" + config_path + "' wants it)");
    }
    const TensorInfo& t = it->second.info;
    const std::string& file = file_paths_[it->second.file];
    if (t.shape != shape)
      throw InputError("'" + file + "': tensor '" + name + "' has shape " + Json(t.shape).dump() + ", '" + config_path +
                       "' wants " + Json(shape).dump());
    if (!is_float_dtype(t.dtype))
      throw InputError("'" + file + "': tensor '" + name + "' has dtype " + t.dtype + " (F32, F64, BF16 or F16 expected)");
    return true;
  });
}

namespace {
template <class T>
void read_range(const MappedFile& map, uint64_t offset, const TensorInfo& t, const std::string& name, std::size_t begin,
                std::size_t count, T* out) {
  const uint64_t n = numel_of(t.shape);
  if (begin > n || count > n - begin)
    throw InternalError("checkpoint read of '" + name + "' [" + std::to_string(begin) + ", +" + std::to_string(count) +
                        ") is outside its " + std::to_string(n) + " elements");
  const std::size_t esz = Tensor::dtype_size(t.dtype);
  const std::size_t chunk = (std::size_t(16) << 20) / esz;  // 16 MB of the file at a time
  for (std::size_t done = 0; done < count;) {
    const std::size_t k = std::min(chunk, count - done);
    const uint64_t at = offset + uint64_t(begin + done) * esz;
    map.will_need(at, uint64_t(k) * esz);
    convert_elements(map.data() + at, t.dtype, k, out + done);
    map.release(at, uint64_t(k) * esz);
    done += k;
  }
}
}  // namespace

void CheckpointReader::read(const std::string& name, std::size_t begin, std::size_t count, float* out) const {
  const Entry& e = entry(name);
  read_range(*maps_[e.file], e.offset, e.info, name, begin, count, out);
}

void CheckpointReader::read(const std::string& name, std::size_t begin, std::size_t count, double* out) const {
  const Entry& e = entry(name);
  read_range(*maps_[e.file], e.offset, e.info, name, begin, count, out);
}

template <class T> void WeightSource::read_parallel(const std::vector<Request<T>>& requests, int threads) const {
  if (sequential()) {  // one stream: the requests one after another, as given
    for (auto& r : requests) read(r.name, r.begin, r.count, r.out);
    return;
  }
  std::vector<Request<T>> chunks;  // 16M elements at most each, so one big tensor spreads over the threads
  const std::size_t per = std::size_t(16) << 20;
  for (auto& r : requests)
    for (std::size_t b = 0; b < r.count; b += per)
      chunks.push_back({r.name, r.begin + b, std::min(per, r.count - b), r.out + b});
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  run_threads(thread_count(threads, chunks.size()), stop, [&](int) {
    for (std::size_t i; !stop && (i = next++) < chunks.size();) read(chunks[i].name, chunks[i].begin, chunks[i].count, chunks[i].out);
  });
}

template void WeightSource::read_parallel<float>(const std::vector<Request<float>>&, int) const;
template void WeightSource::read_parallel<double>(const std::vector<Request<double>>&, int) const;

// ---------------------------------------------------------------------------------------------
// Writer

namespace {
struct Job {
  std::size_t tensor, begin, count, shard;
  uint64_t file_offset;
};

class BufferQueue {  // the ordered writer's hand-off: filled buffers to the writers, empty ones back
 public:
  void push(std::size_t v) {
    {
      std::lock_guard<std::mutex> lock(m_);
      q_.push_back(v);
    }
    cv_.notify_one();
  }
  // false when stopped and empty
  bool pop(std::size_t& v, const std::atomic<bool>& stop) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return !q_.empty() || stop || closed_; });
    if (q_.empty() || stop) return false;
    v = q_.front();
    q_.pop_front();
    return true;
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(m_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  void wake() {  // after `stop` was set: the lock orders it before a waiter's next look
    { std::lock_guard<std::mutex> lock(m_); }
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::size_t> q_;
  bool closed_ = false;
};
}  // namespace

namespace {

// Where every tensor goes: shards as huggingface_hub's split_state_dict_into_shards makes them (layout
// order, a new shard when the next tensor would pass max_shard_bytes, a larger tensor alone), each
// shard's file opened (AtomicFile) with its header written, and each tensor's shard and byte offset.
struct ShardLayout {
  std::vector<std::vector<std::size_t>> shards;
  std::vector<std::string> file_names;
  std::vector<std::unique_ptr<AtomicFile>> files;
  std::vector<uint64_t> bytes, tensor_offset;
  std::vector<std::size_t> tensor_shard;
  uint64_t total = 0;
};

void assign_shards(ShardLayout& L, const std::string& dir, const std::vector<TensorSpec>& tensors, std::size_t esz,
                   uint64_t max_shard_bytes) {
  L.shards.assign(1, {});
  L.bytes.resize(tensors.size());
  uint64_t current = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (__builtin_mul_overflow(numel_of(tensors[i].shape), uint64_t(esz), &L.bytes[i]) ||
        __builtin_add_overflow(L.total, L.bytes[i], &L.total))
      throw InputError("checkpoint '" + dir + "': more than 2^64 bytes");
    if (L.bytes[i] > max_shard_bytes) {
      if (!L.shards.back().empty()) L.shards.emplace_back();
      L.shards.back().push_back(i);
      L.shards.emplace_back();
      current = 0;
      continue;
    }
    if (current + L.bytes[i] > max_shard_bytes && !L.shards.back().empty()) {
      L.shards.emplace_back();
      current = 0;
    }
    L.shards.back().push_back(i);
    current += L.bytes[i];
  }
  if (L.shards.back().empty()) L.shards.pop_back();
}

void open_shards(ShardLayout& L, const std::string& dir, const std::vector<TensorSpec>& tensors, const std::string& dtype) {
  const std::size_t S = L.shards.size();
  L.file_names.resize(S);
  for (std::size_t s = 0; s < S; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, S);
    L.file_names[s] = S == 1 ? "model.safetensors" : name;
  }
  L.tensor_offset.resize(tensors.size());
  L.tensor_shard.resize(tensors.size());
  for (std::size_t s = 0; s < S; ++s) {
    std::vector<SafetensorsPlanEntry> entries;
    for (std::size_t i : L.shards[s]) {
      entries.push_back({tensors[i].name, dtype, tensors[i].shape, L.bytes[i], 0});
      L.tensor_shard[i] = s;
    }
    SafetensorsPlan plan = plan_safetensors(std::move(entries), {{"format", "pt"}});
    for (auto& e : plan.entries)
      for (std::size_t i : L.shards[s])
        if (tensors[i].name == e.name) L.tensor_offset[i] = e.file_offset;
    L.files.push_back(std::make_unique<AtomicFile>(dir + "/" + L.file_names[s]));
    L.files.back()->write_at(0, plan.header.data(), plan.header.size());
  }
}

// Every job fills and writes on its own thread, in any order.
void write_unordered(const std::vector<Job>& jobs, int W, std::size_t chunk, const FillFn& fill,
                     const std::function<void(const Job&, const float*, std::vector<uint8_t>&)>& write_job) {
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> next{0};
  run_threads(W, stop, [&](int) {
    std::vector<float> buf(chunk);
    std::vector<uint8_t> conv;
    for (std::size_t i; !stop && (i = next++) < jobs.size();) {
      fill(jobs[i].tensor, jobs[i].begin, jobs[i].count, buf.data());
      write_job(jobs[i], buf.data(), conv);
    }
  });
}

// One filler (worker 0) in layout order; W writers convert and write. 2W buffers in flight.
void write_ordered(const std::vector<Job>& jobs, int W, std::size_t chunk, const FillFn& fill,
                   const std::function<void(const Job&, const float*, std::vector<uint8_t>&)>& write_job) {
  std::atomic<bool> stop{false};
  const std::size_t B = std::size_t(2 * W);
  std::vector<std::vector<float>> bufs(B, std::vector<float>(chunk));
  std::vector<std::size_t> buf_job(B);
  BufferQueue free_q, full_q;
  for (std::size_t b = 0; b < B; ++b) free_q.push(b);
  run_threads(W + 1, stop, [&](int w) {
    if (w == 0) {
      struct Close {  // the writers stop once the queue is drained, also when filling failed
        BufferQueue& q;
        ~Close() { q.close(); }
      } close{full_q};
      for (std::size_t i = 0; i < jobs.size() && !stop; ++i) {
        std::size_t b;
        if (!free_q.pop(b, stop)) break;
        fill(jobs[i].tensor, jobs[i].begin, jobs[i].count, bufs[b].data());
        buf_job[b] = i;
        full_q.push(b);
      }
      return;
    }
    std::vector<uint8_t> conv;
    try {
      for (std::size_t b; full_q.pop(b, stop);) {
        write_job(jobs[buf_job[b]], bufs[b].data(), conv);
        free_q.push(b);
      }
    } catch (...) {
      stop = true;
      free_q.wake();
      full_q.wake();
      throw;
    }
  });
}

}  // namespace

std::vector<std::string> write_checkpoint_tensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                                  const FillFn& fill, const WriteOptions& o) {
  const std::size_t esz = Tensor::dtype_size(o.dtype);
  torch_dtype_for(o.dtype);  // F32, BF16 or F16 only
  if (tensors.empty()) throw InternalError("write_checkpoint_tensors: no tensors");
  ShardLayout L;
  assign_shards(L, dir, tensors, esz, o.max_shard_bytes);
  open_shards(L, dir, tensors, o.dtype);
  // The jobs: chunks of tensors in layout order, with where each goes.
  const std::size_t chunk = std::max<std::size_t>(1, o.chunk_elements);
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::size_t n = std::size_t(numel_of(tensors[i].shape));
    for (std::size_t b = 0; b < n; b += chunk)
      jobs.push_back({i, b, std::min(chunk, n - b), L.tensor_shard[i], L.tensor_offset[i] + uint64_t(b) * esz});
  }
  // One job: floats checked, converted, written at their place.
  auto write_job = [&](const Job& j, const float* src, std::vector<uint8_t>& conv) {
    for (std::size_t k = 0; k < j.count; ++k)
      if (!std::isfinite(src[k]))
        throw InputError("checkpoint '" + dir + "' not written: tensor '" + tensors[j.tensor].name + "' element " +
                         std::to_string(j.begin + k) + " is " + (std::isnan(src[k]) ? "nan" : "inf"));
    const void* out = src;
    if (o.dtype != "F32") {
      conv.resize(j.count * esz);
      convert_floats(src, j.count, o.dtype, conv.data());
      out = conv.data();
    }
    L.files[j.shard]->write_at(j.file_offset, out, j.count * esz);
  };
  const int W = thread_count(o.threads, jobs.size());
  if (o.ordered) write_ordered(jobs, W, chunk, fill, write_job);
  else write_unordered(jobs, W, chunk, fill, write_job);
  for (auto& f : L.files) f->commit();
  if (L.shards.size() > 1) {
    Json index = {{"metadata", {{"total_size", L.total}}}, {"weight_map", Json::object()}};
    for (std::size_t i = 0; i < tensors.size(); ++i) index["weight_map"][tensors[i].name] = L.file_names[L.tensor_shard[i]];
    write_file_atomic(dir + "/" + kIndexName, index.dump(2) + "\n");
  }
  return L.file_names;
}

void write_checkpoint_config(const std::string& dir, const Config& config, const std::string& disk_dtype) {
  Json j = config.to_json();
  j["torch_dtype"] = torch_dtype_for(disk_dtype);
  write_file_atomic(dir + "/config.json", j.dump(2) + "\n");
}

uint64_t checkpoint_bytes(const Config& config, const std::string& disk_dtype) {
  const int64_t n = config.parameter_count();
  if (n < 0) return UINT64_MAX;
  return uint64_t(n) * Tensor::dtype_size(disk_dtype);
}

// ---------------------------------------------------------------------------------------------
// Streamed random init

// std::mt19937_64 by hand, so the state's 312-word blocks can be handed to other threads to temper.
namespace {
constexpr int kMtN = 312, kMtM = 156;
struct Mt64 {
  uint64_t mt[kMtN];
  explicit Mt64(uint64_t seed) {
    mt[0] = seed;
    for (int i = 1; i < kMtN; ++i) mt[i] = 6364136223846793005ull * (mt[i - 1] ^ (mt[i - 1] >> 62)) + uint64_t(i);
  }
  void twist() {
    constexpr uint64_t upper = 0xFFFFFFFF80000000ull, lower = 0x7FFFFFFFull, a = 0xB5026F5AA96619E9ull;
    auto step = [&](int i, int next, int far) {
      const uint64_t x = (mt[i] & upper) | (mt[next] & lower);
      mt[i] = mt[far] ^ (x >> 1) ^ (a & (0 - (x & 1)));  // a mask, not a branch: x's low bit is random
    };
    // The three ranges of the in-place twist, without a modulo per word (as libstdc++ splits it).
    for (int i = 0; i < kMtN - kMtM; ++i) step(i, i + 1, i + kMtM);
    for (int i = kMtN - kMtM; i < kMtN - 1; ++i) step(i, i + 1, i + kMtM - kMtN);
    step(kMtN - 1, 0, kMtM - 1);
  }
};
inline uint64_t temper(uint64_t y) {
  y ^= (y >> 29) & 0x5555555555555555ull;
  y ^= (y << 17) & 0x71D67FFFEDA60000ull;
  y ^= (y << 37) & 0xFFF7EEE000000000ull;
  return y ^ (y >> 43);
}
// generate_canonical<double, 53>(mt19937_64) as libstdc++ computes it: one draw over 2^64.
inline double canonical(uint64_t u) {
  // double(u) without the sign-bit branch a compiler emits for an unsigned 64-bit conversion (half
  // mispredicted on random words): both halves are exact and the sum is rounded once, so it is the
  // same correctly rounded double.
  const double d = double(uint32_t(u >> 32)) * 4294967296.0 + double(uint32_t(u));
  double r = d * 1.0 / 18446744073709551616.0;
  return r >= 1.0 ? std::nextafter(1.0, 0.0) : r;
}
}  // namespace

struct InitNormalStream::Impl {
  struct Slot {
    std::vector<uint64_t> raw;
    std::vector<float> out;
    std::size_t count = 0;
    int64_t seg = -1;  // -1: free
    bool done = false;
  };
  static constexpr std::size_t kBlocks = 4096;  // a segment: 4096 x 312 words (10 MB raw)
  double std = 0;
  std::string round_to;  // F32: as drawn; BF16, F16: rounded there and back by the workers
  Mt64 engine;
  std::mutex engine_m, m;
  std::condition_variable cv;
  std::vector<Slot> slots;
  int64_t next_seg = 0, consume_seg = 0;
  std::size_t consume_pos = 0;
  bool stop = false;
  std::vector<std::thread> workers;

  Impl(uint64_t seed, double s, int threads, std::string r)
      : std(s), round_to(std::move(r)), engine(seed), slots(std::size_t(threads) + 2) {
    for (int w = 0; w < threads; ++w) workers.emplace_back([this] { work(); });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
  }
  void work() {
    for (;;) {
      Slot* slot = nullptr;
      {
        std::lock_guard<std::mutex> order(engine_m);  // segments take the engine's words in their order
        {
          std::unique_lock<std::mutex> lock(m);
          cv.wait(lock, [&] { return stop || slots[std::size_t(next_seg) % slots.size()].seg == -1; });
          if (stop) return;
          slot = &slots[std::size_t(next_seg) % slots.size()];
          slot->seg = next_seg++;
          slot->done = false;
        }
        slot->raw.resize(kBlocks * kMtN);
        for (std::size_t b = 0; b < kBlocks; ++b) {
          engine.twist();
          std::copy_n(engine.mt, kMtN, slot->raw.data() + b * kMtN);
        }
      }
      // The polar method exactly as std::normal_distribution<double> runs it: pairs (x, y) of
      // uniforms in (-1, 1), rejected outside the unit disc; y * mult first, x * mult saved for next.
      slot->out.resize(slot->raw.size());
      std::size_t c = 0;
      for (std::size_t j = 0; j + 1 < slot->raw.size(); j += 2) {
        const double x = 2.0 * canonical(temper(slot->raw[j])) - 1.0;
        const double y = 2.0 * canonical(temper(slot->raw[j + 1])) - 1.0;
        const double r2 = x * x + y * y;
        if (r2 > 1.0 || r2 == 0.0) continue;
        const double mult = std::sqrt(-2 * std::log(r2) / r2);
        slot->out[c++] = float(y * mult * std + 0.0);
        slot->out[c++] = float(x * mult * std + 0.0);
      }
      if (round_to != "F32") {  // as stored on disk and read back; the raw words' room holds the 16-bit copy
        convert_floats(slot->out.data(), c, round_to, slot->raw.data());
        convert_elements(slot->raw.data(), round_to, c, slot->out.data());
      }
      {
        std::lock_guard<std::mutex> lock(m);
        slot->count = c;
        slot->done = true;
      }
      cv.notify_all();
    }
  }
  void next(float* out, std::size_t n) {
    while (n > 0) {
      Slot* slot;
      {
        std::unique_lock<std::mutex> lock(m);
        slot = &slots[std::size_t(consume_seg) % slots.size()];
        cv.wait(lock, [&] { return slot->seg == consume_seg && slot->done; });
      }
      const std::size_t k = std::min(n, slot->count - consume_pos);
      std::copy_n(slot->out.data() + consume_pos, k, out);
      out += k;
      n -= k;
      consume_pos += k;
      if (consume_pos == slot->count) {
        {
          std::lock_guard<std::mutex> lock(m);
          slot->seg = -1;
          ++consume_seg;
          consume_pos = 0;
        }
        cv.notify_all();
      }
    }
  }
};

InitNormalStream::InitNormalStream(uint64_t seed, double std, int threads, std::string round_to)
    : impl_((torch_dtype_for(round_to),  // F32, BF16 or F16, refused here: the workers round and must not throw
             std::make_unique<Impl>(seed, std, thread_count(threads, 64), std::move(round_to)))) {}
InitNormalStream::~InitNormalStream() = default;
void InitNormalStream::next(float* out, std::size_t n) { impl_->next(out, n); }

// ---------------------------------------------------------------------------------------------
// The random init drawn as it is read

struct RandomInitWeights::Impl {
  enum Kind { kDrawn, kOnes, kZeros };  // as Model::init_random decides: norms 1, biases 0, the rest drawn
  struct Tensor {
    std::size_t size;
    Kind kind;
  };
  std::vector<Tensor> tensors;  // layout order
  std::map<std::string, std::size_t> index;
  uint64_t seed;
  double std;
  int threads;
  std::string dtype;  // the values as stored in it and read back (the stream's workers round them)
  std::unique_ptr<InitNormalStream> stream;  // made at the first draw: a source never read starts no thread
  std::size_t at = 0, pos = 0;               // the stream stands at element `pos` of tensor `at`
  std::vector<float> scratch;
  static constexpr std::size_t kBlock = std::size_t(1) << 20;  // elements skipped at a time

  // `count` elements of tensor `i` from where the stream stands (the caller moved it there).
  void draw(std::size_t i, std::size_t count, float* out) {
    if (tensors[i].kind == kDrawn) {
      if (!stream) stream = std::make_unique<InitNormalStream>(seed, std, threads, dtype);  // rounded by its workers
      stream->next(out, count);
    } else {
      std::fill_n(out, count, tensors[i].kind == kOnes ? 1.0f : 0.0f);
    }
    pos += count;
    if (pos == tensors[i].size) ++at, pos = 0;
  }
  void read(const std::string& name, std::size_t begin, std::size_t count, float* out) {
    auto it = index.find(name);
    if (it == index.end()) throw InternalError("random init: no tensor '" + name + "'");
    const std::size_t i = it->second;
    if (begin > tensors[i].size || count > tensors[i].size - begin)
      throw InternalError("random init: read of '" + name + "' [" + std::to_string(begin) + ", +" + std::to_string(count) +
                          ") is outside its " + std::to_string(tensors[i].size) + " elements");
    if (count == 0) return;
    if (i < at || (i == at && begin < pos))
      throw InternalError("random init: '" + name + "' read from element " + std::to_string(begin) +
                          " behind the stream (its elements come once, in layout order)");
    while (at < i || pos < begin) {  // what the caller skips is drawn and dropped
      const std::size_t end = at < i ? tensors[at].size : begin;
      const std::size_t k = std::min(kBlock, end - pos);
      scratch.resize(k);
      draw(at, k, scratch.data());
    }
    draw(i, count, out);
  }
};

RandomInitWeights::RandomInitWeights(const Config& config, uint64_t seed, double std, const std::string& disk_dtype,
                                     std::string dir, int threads)
    : dir_(std::move(dir)), impl_(std::make_unique<Impl>()) {
  config.validate();
  torch_dtype_for(disk_dtype);  // F32, BF16 or F16 only
  impl_->seed = seed;
  impl_->std = std;
  impl_->threads = threads;
  impl_->dtype = disk_dtype;
  for_each_param(config, [&](const std::string& name, const std::vector<int64_t>& shape) {
    const bool is_norm = name.find("norm.weight") != std::string::npos;
    const bool is_bias = name.size() > 5 && name.substr(name.size() - 5) == ".bias";
    impl_->index[name] = impl_->tensors.size();
    impl_->tensors.push_back({std::size_t(numel_of(shape)), is_norm ? Impl::kOnes : is_bias ? Impl::kZeros : Impl::kDrawn});
    return true;
  });
}

RandomInitWeights::~RandomInitWeights() = default;

bool RandomInitWeights::has(const std::string& name) const { return impl_->index.count(name) > 0; }

void RandomInitWeights::read(const std::string& name, std::size_t begin, std::size_t count, float* out) const {
  impl_->read(name, begin, count, out);
}

void RandomInitWeights::read(const std::string& name, std::size_t begin, std::size_t count, double* out) const {
  std::vector<float> f;
  for (std::size_t b = 0; b < count; b += Impl::kBlock) {
    f.resize(std::min(Impl::kBlock, count - b));
    impl_->read(name, begin + b, f.size(), f.data());
    std::copy(f.begin(), f.end(), out + b);
  }
}

void init_random_checkpoint(const Config& config, uint64_t seed, double std, const std::string& dir, WriteOptions options) {
  // F32 here: the writer rounds to options.dtype as it stores.
  RandomInitWeights weights(config, seed, std, "F32", dir, options.threads);
  std::vector<TensorSpec> specs;
  for_each_param(config, [&](const std::string& name, const std::vector<int64_t>& shape) {
    specs.push_back({name, shape});
    return true;
  });
  options.ordered = true;  // the stream's order
  fs::create_directories(dir);
  write_checkpoint_tensors(
      dir, specs,
      [&](std::size_t i, std::size_t begin, std::size_t count, float* out) { weights.read(specs[i].name, begin, count, out); },
      options);
  write_checkpoint_config(dir, config, options.dtype);
}

}  // namespace ca::nn
