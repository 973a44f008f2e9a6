// shmatari's seed derivation in plain C++17, from the description in
// src/shmatari/seeding.py and docs/reproducibility.md (NumPy's SeedSequence,
// itself a port of Melissa O'Neill's seed_seq). tests/test_seeding.py
// compiles this file and checks its output against NumPy.
//
//   c++ -std=c++17 -O2 -o seed_sequence examples/seed_sequence.cpp
//   ./seed_sequence SEED INDEX     # SEED: decimal, < 2**128; INDEX: < 2**32
//
// prints, for SeedSequence(SEED, spawn_key=(INDEX,)):
//   words W0 W1 W2 W3      generate_state(4, uint32)
//   worker_seed32 N        shmatari.seeding.worker_seed(SEED, INDEX, bits=32)
//   worker_seed64 N        shmatari.seeding.worker_seed(SEED, INDEX)  (bits=64)
//   ale_seed N             the random_seed shmatari gives env INDEX's ALE
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t &hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> 16;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> 16;
  return result;
}

// Step 1: the seed's 32-bit words, least significant first (0 is one word),
// padded with zeros to the pool size, then the spawn key's words.
std::vector<uint32_t> assemble(std::vector<uint32_t> seed_words, uint32_t index) {
  while (seed_words.size() < kPoolSize) seed_words.push_back(0);
  seed_words.push_back(index);
  return seed_words;
}

// Step 2: mix the assembled entropy into a 4-word pool.
std::vector<uint32_t> mix_entropy(const std::vector<uint32_t> &entropy) {
  std::vector<uint32_t> pool(kPoolSize);
  uint32_t h = kInitA;
  for (size_t i = 0; i < kPoolSize; ++i)
    pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0, h);
  for (size_t src = 0; src < kPoolSize; ++src)
    for (size_t dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], h));
  for (size_t src = kPoolSize; src < entropy.size(); ++src)
    for (size_t dst = 0; dst < kPoolSize; ++dst)
      pool[dst] = mix(pool[dst], hashmix(entropy[src], h));
  return pool;
}

// Step 3: generate_state(n, uint32).
std::vector<uint32_t> generate_state(const std::vector<uint32_t> &pool, size_t n) {
  std::vector<uint32_t> out(n);
  uint32_t h = kInitB;
  for (size_t j = 0; j < n; ++j) {
    uint32_t v = pool[j % kPoolSize];
    v ^= h;
    h *= kMultB;
    v *= h;
    v ^= v >> 16;
    out[j] = v;
  }
  return out;
}

// A decimal string as 32-bit words, least significant first.
bool parse_decimal(const std::string &text, std::vector<uint32_t> &words) {
  words.clear();
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    uint64_t carry = static_cast<uint64_t>(c - '0');
    for (uint32_t &w : words) {
      uint64_t v = static_cast<uint64_t>(w) * 10 + carry;
      w = static_cast<uint32_t>(v);
      carry = v >> 32;
    }
    if (carry) words.push_back(static_cast<uint32_t>(carry));
  }
  if (words.empty()) words.push_back(0);
  return words.size() <= 4;  // below 2**128 (shmatari refuses larger seeds)
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<uint32_t> seed_words, index_words;
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("usage: %s SEED INDEX  (SEED < 2**128, INDEX < 2**32, decimal)\n", argv[0]);
    return 0;  // asked for: status 0, on stdout (a newcomer's pass)
  }
  if (argc != 3 || !parse_decimal(argv[1], seed_words) ||
      !parse_decimal(argv[2], index_words) || index_words.size() != 1) {
    std::fprintf(stderr, "usage: %s SEED INDEX  (SEED < 2**128, INDEX < 2**32, decimal)\n",
                 argv[0]);
    return 2;
  }
  const std::vector<uint32_t> pool = mix_entropy(assemble(seed_words, index_words[0]));
  const std::vector<uint32_t> w = generate_state(pool, 4);
  std::printf("words %u %u %u %u\n", w[0], w[1], w[2], w[3]);
  std::printf("worker_seed32 %u\n", w[0]);
  std::printf("worker_seed64 %llu\n",
              static_cast<unsigned long long>(w[0]) | static_cast<unsigned long long>(w[1]) << 32);
  std::printf("ale_seed %u\n", w[0] & 0x7fffffffu);
  return 0;
}
