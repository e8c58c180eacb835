// Checkpoints larger than memory: a reader that maps a Hugging Face folder (one model.safetensors, or
// model.safetensors.index.json and its shards, or several *.safetensors) and converts one tensor, or a
// range of it, at a time; a writer that streams tensors into HF-style shards from several threads; and
// the random init, written tensor by tensor or drawn as it is loaded (--load-format dummy).
// load_model / save_model (model.hpp) are built on these.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "libcommon/nn/model.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::nn {

// safetensors dtype on disk for a config.json torch_dtype ("float32" -> F32, "bfloat16" -> BF16,
// "float16" -> F16); InputError for another. And back.
std::string disk_dtype_for(const std::string& torch_dtype);
std::string torch_dtype_for(const std::string& disk_dtype);
// The folder's config.json torch_dtype as a disk dtype ("F32" when it names none): what to save a
// model loaded from `dir` in, to keep its precision on disk.
std::string checkpoint_disk_dtype(const std::string& dir);

// Where a model's weights come from as it is loaded: a checkpoint's files (CheckpointReader) or init's
// random draw (RandomInitWeights, for --load-format dummy). Tensors by their Hugging Face name, ranges
// of their elements as floats; a loader (load_model, nn_cuda's streaming CudaModel) reads through this
// and does not know which it has.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const std::string& dir() const = 0;  // the checkpoint folder, for messages
  virtual bool has(const std::string& name) const = 0;
  // Elements [begin, begin + count) of `name` converted into `out`.
  virtual void read(const std::string& name, std::size_t begin, std::size_t count, float* out) const = 0;
  virtual void read(const std::string& name, std::size_t begin, std::size_t count, double* out) const = 0;
  // True when reads must come in layout order, each tensor's ranges in order (a random stream).
  virtual bool sequential() const { return false; }

  // Several reads at once: over `threads` threads (0: the machine's cores, at most 16) in chunks, or
  // one after another in the order given for a sequential source.
  template <class T> struct Request {
    std::string name;
    std::size_t begin = 0, count = 0;
    T* out = nullptr;
  };
  template <class T> void read_parallel(const std::vector<Request<T>>& requests, int threads = 0) const;
};

// Reads a checkpoint folder's weights through memory maps. The constructor reads every header and
// checks it (sizes, ranges inside the file, no overlaps, no tensor in two files); with an index the
// index decides which files belong (each named once, a plain file name in the folder: never a path
// with '/' or '..', so nothing outside the folder is opened), every tensor must be in the file the
// index names, and a *.safetensors in the folder that the index does not name is refused (a stale
// shard). InputError naming the file and tensor for every refusal. Thread-safe for reads.
class CheckpointReader final : public WeightSource {
 public:
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader() override;
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const override { return dir_; }
  const std::vector<std::string>& files() const { return file_paths_; }  // the weight files read
  bool has(const std::string& name) const override;
  const TensorInfo& info(const std::string& name) const;  // InternalError when absent (ask has() first)
  const std::string& file_of(const std::string& name) const;
  std::vector<std::string> names() const;

  // Every tensor of the config's layout is here with its shape and a float dtype (F32, F64, BF16,
  // F16), except those in `may_be_missing`. `config_path` names the config in messages.
  void check_layout(const Config& config, const std::string& config_path, const std::set<std::string>& may_be_missing = {}) const;

  // Elements [begin, begin + count) of `name` converted into `out`, through the map; the pages read
  // are given back as it goes, so resident memory stays about one chunk. InternalError when the range
  // is outside the tensor.
  void read(const std::string& name, std::size_t begin, std::size_t count, float* out) const override;
  void read(const std::string& name, std::size_t begin, std::size_t count, double* out) const override;
  // The tensor's bytes as stored (its dtype: info(name).dtype), for a caller converting itself.
  const uint8_t* raw(const std::string& name) const;

 private:
  struct Entry;
  const Entry& entry(const std::string& name) const;
  std::string dir_;
  std::vector<std::string> file_paths_;
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::unique_ptr<std::map<std::string, Entry>> entries_;
};

// The weights `ppo-step init --seed seed --std std` writes for `config` in `disk_dtype` (init_random_checkpoint),
// as a CheckpointReader reads them back (each value rounded to disk_dtype: F32, BF16 or F16), drawn as
// they are read, never on disk: --load-format dummy. One stream in layout order (InitNormalStream;
// norms 1, biases 0), so reads must come in layout order, each tensor's ranges in order; a tensor or
// range skipped is drawn and dropped, a read behind the stream is an InternalError. Host memory: the
// stream's buffers (a few hundred MB at most) and what the caller reads into. Not thread-safe.
class RandomInitWeights final : public WeightSource {
 public:
  RandomInitWeights(const Config& config, uint64_t seed, double std, const std::string& disk_dtype, std::string dir,
                    int threads = 0);
  ~RandomInitWeights() override;
  const std::string& dir() const override { return dir_; }
  bool has(const std::string& name) const override;
  void read(const std::string& name, std::size_t begin, std::size_t count, float* out) const override;
  void read(const std::string& name, std::size_t begin, std::size_t count, double* out) const override;
  bool sequential() const override { return true; }

 private:
  struct Impl;
  std::string dir_;
  std::unique_ptr<Impl> impl_;  // the stream's state, advanced by reads (hence mutable through const reads)
};

// A checkpoint folder opened for loading as load_model opens it: its config (value_head set when a causal
// LM is opened as a critic's starting point, whose score head then starts at zero and may be missing)
// and the source of its weights: a reader whose headers were checked against that layout, or with
// format.dummy the random init of the folder's config.json in its torch_dtype (the folder's weight
// files, if any, are not read). InputError for a critic opened as a policy, a missing tensor, a wrong
// shape.
struct OpenCheckpoint {
  Config config;
  std::unique_ptr<WeightSource> reader;
};
OpenCheckpoint open_checkpoint(const std::string& dir, bool as_critic, const LoadFormat& format = {});

// What the writer writes and how.
struct WriteOptions {
  std::string dtype = "F32";                   // on disk: F32, BF16 or F16
  uint64_t max_shard_bytes = 5'000'000'000ull;  // Hugging Face's default max_shard_size "5GB"
  int threads = 0;                             // 0: the machine's cores, at most 16
  // fill is called from one thread, in layout order, each tensor's ranges in order (a sequential
  // random stream); otherwise from the writing threads in any order.
  bool ordered = false;
  std::size_t chunk_elements = std::size_t(8) << 20;  // elements per fill call and write
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};
// fill(index, begin, count, out): elements [begin, begin + count) of tensors[index] as floats.
using FillFn = std::function<void(std::size_t index, std::size_t begin, std::size_t count, float* out)>;

// Writes `tensors` (layout order) into `dir` as Hugging Face does: model.safetensors when everything
// fits one shard (laid out as write_safetensors lays it out), else model-0000K-of-0000N.safetensors
// (tensors assigned in layout order, a new shard when the next tensor would pass max_shard_bytes, a
// tensor larger than that alone in its shard) and model.safetensors.index.json (metadata.total_size,
// weight_map). Each file is written whole (AtomicFile) and renamed into place only after every file
// was written; a non-finite value is an InputError naming the tensor and element, and nothing is
// renamed into place. Memory: about two chunks per thread. Returns the file names written.
std::vector<std::string> write_checkpoint_tensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                                  const FillFn& fill, const WriteOptions& options);

// config.json for a checkpoint in `disk_dtype` (torch_dtype set to match), written whole.
void write_checkpoint_config(const std::string& dir, const Config& config, const std::string& disk_dtype);

// save_model with the writer's options (dtype, shard size, threads); the two-argument save_model is
// this with WriteOptions{} (F32, 5 GB shards).
template <class T> void save_model(const Model<T>& model, const std::string& dir, const WriteOptions& options);

// The weights Model<float>::init_random(seed, std) gives, bit for bit (one mt19937_64 stream in
// layout order; norms 1, biases 0: RandomInitWeights' draw), written tensor by tensor without holding
// the model: for shapes larger than this machine's memory. config.json is written too.
void init_random_checkpoint(const Config& config, uint64_t seed, double std, const std::string& dir, WriteOptions options);

// The values std::normal_distribution<double>(0, std) draws from std::mt19937_64(seed), rounded to
// float, in order, bit for bit: the stream Model::init_random uses. The engine runs on one thread
// (its words in blocks), the polar method's uniforms, logs and square roots on `threads` (0: the cores).
// With `round_to` BF16 or F16 each value is also rounded to that dtype and back (as a writer stores it
// and a reader reads it), on the same threads; F32 leaves them as drawn.
class InitNormalStream {
 public:
  InitNormalStream(uint64_t seed, double std, int threads = 0, std::string round_to = "F32");
  ~InitNormalStream();
  void next(float* out, std::size_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bytes the config's weights take on disk in `disk_dtype`.
uint64_t checkpoint_bytes(const Config& config, const std::string& disk_dtype);

}  // namespace ca::nn
