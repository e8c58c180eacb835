// Units of the writes a checkpoint (and the cubin cache, and --port-file) depend on: AtomicFile /
// write_file_atomic / write_safetensors fail loudly on a failed write and leave the target as it was;
// CheckpointWriter puts a checkpoint folder in place whole or not at all. The failed write is a real
// one: a child process under RLIMIT_FSIZE with SIGXFSZ ignored gets EFBIG, as a full disk gives ENOSPC.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "libcommon/atomic_file.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `body` in a child whose files may not grow past `limit_bytes`; its exit status: 0 when `body`
// threw an EnvironmentError naming `name`, 1 when it returned, 2 for any other exception.
int in_small_file_limit(rlim_t limit_bytes, const std::string& name, const std::function<void()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl {limit_bytes, limit_bytes};
    setrlimit(RLIMIT_FSIZE, &rl);
    int code = 2;
    try {
      body();
      code = 1;
    } catch (const ca::EnvironmentError& e) {
      code = std::string(e.what()).find(name) != std::string::npos ? 0 : 3;
    } catch (...) {
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

int leftovers(const fs::path& dir) {  // temp and staging files still in dir
  int n = 0;
  for (auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    n += name.find(".tmp.") != std::string::npos || name.find(".staging-") != std::string::npos ||
         name.find(".old-") != std::string::npos;
  }
  return n;
}
}  // namespace

TEST_CASE("write_file_atomic: a failed write (EFBIG) is an error and the earlier file stays whole") {
  const fs::path dir = fs::temp_directory_path() / ("ca_atomic_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path f = dir / "state.json";
  ca::write_file_atomic(f.string(), "{\"step\": 7}\n");
  REQUIRE(slurp(f) == "{\"step\": 7}\n");
  // 2,000 bytes against a 1,024-byte limit: the old helper buffered them in an ofstream, lost them at
  // the unchecked close and renamed a cut file into place with exit 0.
  CHECK(in_small_file_limit(1024, f.string(), [&] { ca::write_file_atomic(f.string(), std::string(2000, 'x')); }) == 0);
  CHECK(slurp(f) == "{\"step\": 7}\n");
  CHECK(leftovers(dir) == 0);
  // Under the limit it writes.
  CHECK(in_small_file_limit(1024, f.string(), [&] { ca::write_file_atomic(f.string(), "{\"step\": 8}\n"); }) == 1);
  CHECK(slurp(f) == "{\"step\": 8}\n");
  // A target in a folder that does not exist: an error naming it, not a silent nothing.
  CHECK_THROWS_AS(ca::write_file_atomic((dir / "no/such/file").string(), "x"), ca::EnvironmentError);
  fs::remove_all(dir);
}

TEST_CASE("write_safetensors: a failed write leaves no file and no temp file") {
  const fs::path dir = fs::temp_directory_path() / ("ca_atomic_st_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ca::TensorMap t;
  t.emplace("w", ca::Tensor::zeros("F32", {64, 64}));  // 16 KiB
  const fs::path f = dir / "model.safetensors";
  CHECK(in_small_file_limit(4096, f.string(), [&] { ca::write_safetensors(f.string(), t); }) == 0);
  CHECK(!fs::exists(f));
  CHECK(leftovers(dir) == 0);
  ca::write_safetensors(f.string(), t);
  CHECK(ca::read_safetensors(f.string()).tensors.at("w").numel() == 64 * 64);
  fs::remove_all(dir);
}

TEST_CASE("safetensors headers: shapes that overflow or are negative are refused, not wrapped") {
  const fs::path dir = fs::temp_directory_path() / ("ca_st_shape_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write_header = [&](const std::string& name, const std::string& header) {
    std::ofstream out(dir / name, std::ios::binary);
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
  };
  // 2^62 * 4 elements of 4 bytes wraps to 0 bytes in 64 bits: it matched an empty data range.
  write_header("wrap.safetensors", R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})");
  CHECK_THROWS_AS(ca::read_safetensors_header((dir / "wrap.safetensors").string()), ca::InputError);
  write_header("neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1,-4],"data_offsets":[0,16]}})");
  CHECK_THROWS_AS(ca::read_safetensors((dir / "neg.safetensors").string()), ca::InputError);
  fs::remove_all(dir);
}

TEST_CASE("CheckpointWriter: complete or not at all, an earlier checkpoint replaced whole") {
  const fs::path dir = fs::temp_directory_path() / ("ca_ckpt_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path out = dir / "step-1";
  // Not committed (an exception on the way): nothing at OUT, nothing staged left.
  {
    ca::nn::CheckpointWriter w(out.string());
    ca::write_file_atomic(w.path() + "/config.json", "{}");
  }
  CHECK(!fs::exists(out));
  CHECK(leftovers(dir) == 0);
  // Committed over an earlier checkpoint with a stale shard: only the new files are there.
  fs::create_directories(out);
  ca::write_file_atomic((out / "config.json").string(), "old");
  ca::write_file_atomic((out / "model-00002-of-00002.safetensors").string(), "stale");
  {
    ca::nn::CheckpointWriter w(out.string());
    ca::write_file_atomic(w.path() + "/config.json", "new");
    fs::create_directories(w.path() + "/critic");
    ca::write_file_atomic(w.path() + "/critic/config.json", "critic");
    w.commit();
  }
  CHECK(slurp(out / "config.json") == "new");
  CHECK(slurp(out / "critic/config.json") == "critic");
  CHECK(!fs::exists(out / "model-00002-of-00002.safetensors"));
  CHECK(leftovers(dir) == 0);
  // A folder that is not a checkpoint is refused, before and untouched.
  const fs::path home = dir / "home";
  fs::create_directories(home);
  ca::write_file_atomic((home / "notes.txt").string(), "mine");
  CHECK_THROWS_AS(ca::nn::CheckpointWriter(home.string()), ca::UsageError);
  CHECK(slurp(home / "notes.txt") == "mine");
  // A failed write inside a staged checkpoint: EnvironmentError, and the earlier checkpoint as it was.
  CHECK(in_small_file_limit(1024, "model.safetensors", [&] {
          ca::nn::CheckpointWriter w(out.string());
          ca::TensorMap t;
          t.emplace("w", ca::Tensor::zeros("F32", {32, 32}));
          ca::write_safetensors(w.path() + "/model.safetensors", t);
          w.commit();
        }) == 0);
  CHECK(slurp(out / "config.json") == "new");
  CHECK(leftovers(dir) == 0);
  fs::remove_all(dir);
}

TEST_CASE("native model config: sizes past 32 bits and models larger than memory are refused") {
  ca::Json j = ca::Json::parse(R"({"vocab_size": 4294967301, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})");
  CHECK_THROWS_WITH_AS(ca::nn::Config::from_json(j), doctest::Contains("outside 32 bits"), ca::InputError);
  j["vocab_size"] = 8;
  j["hidden_size"] = 1000000000;  // q_proj alone is 10^18 parameters
  CHECK_THROWS_WITH_AS(ca::nn::Config::from_json(j), doctest::Contains("2^60"), ca::InputError);
  j["hidden_size"] = 1000000;
  j["num_attention_heads"] = 8;
  j["num_key_value_heads"] = 8;
  ca::nn::Config c = ca::nn::Config::from_json(j);  // valid shapes, 10^13 parameters ...
  CHECK_THROWS_WITH_AS(ca::nn::Model<float>{c}, doctest::Contains("GiB"), ca::InputError);  // ... but not here
}
