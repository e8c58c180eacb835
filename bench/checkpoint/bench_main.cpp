// checkpoint-bench: the streaming checkpoint layer's two halves timed alone, for bench/checkpoint/run.sh.
//   checkpoint-bench read DIR [THREADS] [cold]   every tensor read through CheckpointReader (converted to
//       float) into one reused buffer, as the GPU upload reads them; `cold` first drops the files from
//       the page cache (posix_fadvise on the clean pages: no root needed).
//   checkpoint-bench write CONFIG OUT DTYPE [THREADS]   the config's tensors written by the sharded writer
//       from a 64 MB source buffer (a host copy of device memory, as a GPU save downloads them).
//   checkpoint-bench dummy CONFIG DTYPE [THREADS]   every tensor of the config drawn through
//       RandomInitWeights (--load-format dummy: init's stream, rounded to DTYPE) in the ranges and the
//       order nn_cuda's streaming CudaModel reads them (64M floats, layout order).
// One JSON line on stdout: seconds, bytes on disk, GB/s.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>

#include "libcommon/nn/checkpoint.hpp"
#include "libcommon/paths.hpp"

using namespace ca;

int main(int argc, char** argv) {
  try {
    if (argc < 3) {
      std::cerr << "usage: checkpoint-bench read DIR [THREADS] [cold] | write CONFIG OUT DTYPE [THREADS] | dummy CONFIG DTYPE [THREADS]\n";
      return 1;
    }
    const std::string mode = argv[1];
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t bytes = 0;
    if (mode == "read") {
      const int threads = argc > 3 ? std::atoi(argv[3]) : 0;
      if (argc > 4 && std::string(argv[4]) == "cold") {
        for (auto& e : std::filesystem::directory_iterator(argv[2])) {
          int fd = ::open(e.path().c_str(), O_RDONLY);
          if (fd >= 0) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), ::close(fd);
        }
      }
      const auto t_open = std::chrono::steady_clock::now();
      nn::CheckpointReader r(argv[2]);
      // One reused buffer of 64M floats (256 MB): each tensor read through it in ranges, the threads
      // sharing each range, as a GPU upload through a pinned staging buffer would.
      const std::size_t range = std::size_t(64) << 20;
      std::vector<float> buffer(range);
      for (auto& name : r.names()) {
        std::size_t n = 1;
        for (auto d : r.info(name).shape) n *= std::size_t(d);
        bytes += r.info(name).bytes;
        for (std::size_t b = 0; b < n; b += range) r.read_parallel<float>({{name, b, std::min(range, n - b), buffer.data()}}, threads);
      }
      (void)t_open;
    } else if (mode == "dummy" && argc >= 4) {
      const nn::Config c = nn::Config::from_json(parse_json(read_file(argv[2]), argv[2]));
      nn::RandomInitWeights w(c, 1, nn::kInitStd, argv[3], "dummy", argc > 4 ? std::atoi(argv[4]) : 0);
      const std::size_t range = std::size_t(64) << 20;
      std::vector<float> buffer(range);
      nn::for_each_param(c, [&](const std::string& name, const std::vector<int64_t>& shape) {
        std::size_t n = 1;
        for (auto d : shape) n *= std::size_t(d);
        bytes += n * 4;  // floats handed to the loader
        for (std::size_t b = 0; b < n; b += range) w.read(name, b, std::min(range, n - b), buffer.data());
        return true;
      });
    } else if (mode == "write" && argc >= 5) {
      Json j = parse_json(read_file(argv[2]), argv[2]);
      nn::Config c = nn::Config::from_json(j);
      std::vector<nn::TensorSpec> specs;
      nn::for_each_param(c, [&](const std::string& name, const std::vector<int64_t>& shape) {
        specs.push_back({name, shape});
        return true;
      });
      std::vector<float> source(std::size_t(16) << 20);
      std::mt19937 rng(1);
      std::normal_distribution<float> normal(0.0f, 0.02f);
      for (auto& v : source) v = normal(rng);
      nn::WriteOptions o;
      o.dtype = argv[4];
      o.threads = argc > 5 ? std::atoi(argv[5]) : 0;
      std::filesystem::create_directories(argv[3]);
      nn::write_checkpoint_tensors(argv[3], specs, [&](std::size_t i, std::size_t begin, std::size_t count, float* out) {
        std::size_t at = (begin + i * 7919) % source.size();
        for (std::size_t k = 0; k < count;) {
          std::size_t n = std::min(count - k, source.size() - at);
          std::copy_n(source.data() + at, n, out + k);
          k += n;
          at = 0;
        }
      }, o);
      nn::write_checkpoint_config(argv[3], c, o.dtype);
      bytes = nn::checkpoint_bytes(c, o.dtype);
    } else {
      std::cerr << "checkpoint-bench: unknown mode\n";
      return 1;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << Json{{"mode", mode}, {"seconds", s}, {"bytes", bytes}, {"gb_per_s", double(bytes) / s / 1e9}}.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "checkpoint-bench: " << e.what() << "\n";
    return 2;
  }
}
