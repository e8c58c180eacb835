// The generator's own PRNG (splitmix64 seeding xoshiro256**): the same stream on every machine and
// standard library, which std::uniform_*_distribution does not promise.
#pragma once
#include <cstdint>
#include <vector>

namespace ca::ops_synth {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Mixes two words into one seed (task seed = mix(run seed, index)).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xD1B54A32D192ED03ull);
  splitmix64(s);
  return splitmix64(s);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64(sm);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n) by Lemire's multiply-shift with rejection: exact, portable.
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    for (;;) {
      unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
      uint64_t low = static_cast<uint64_t>(m);
      if (low >= n || low >= (-n) % n) return static_cast<uint64_t>(m >> 64);
    }
  }
  // Uniform integer in [lo, hi] (inclusive).
  int64_t range(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }
  // Index drawn with integer weights (all >= 0, sum > 0).
  std::size_t weighted(const std::vector<uint32_t>& weights) {
    uint64_t total = 0;
    for (auto w : weights) total += w;
    uint64_t r = below(total);
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (r < weights[i]) return i;
      r -= weights[i];
    }
    return weights.size() - 1;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace ca::ops_synth
