// Fuzzes the text corpus loader (TextCorpus::load) and the windows training draws from it. The first two
// input bytes pick the validation fraction and the block size; the rest is the text file. A corpus
// loaded without error must split the file exactly, and every window must lie inside its text.
#include <algorithm>
#include <random>
#include <stdexcept>

#include "fuzz_target.h"
#include "mantissa/data/datasets.h"

using mantissa::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const double fraction = (data[0] + 1) / 258.0;  // in (0, 1), as the loader requires
  const std::int64_t block = 1 + data[1] * 8;
  const auto path = mantissa::fuzz::write_scratch("input.txt", data + 2, size - 2);
  mantissa::TextCorpus c;
  try {
    c = mantissa::TextCorpus::load(path, fraction);
  } catch (const mantissa::DataError&) {
    return 0;
  }
  require(c.train.size() + c.validation.size() == size - 2, "train and validation split the file");
  require(std::equal(c.train.begin(), c.train.end(), data + 2), "train is the file's beginning");
  std::mt19937_64 rng(size);
  std::vector<std::int64_t> inputs, targets;
  for (const auto* part : {&c.train, &c.validation}) {
    try {
      mantissa::TextCorpus::sample(*part, 4, block, rng, inputs, targets);
    } catch (const std::invalid_argument&) {
      require(static_cast<std::int64_t>(part->size()) <= block + 1, "only a text shorter than a block is refused");
      continue;
    }
    require(inputs.size() == static_cast<std::size_t>(4 * block) && targets.size() == inputs.size(), "window sizes");
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      require(inputs[i] >= 0 && inputs[i] < 256 && targets[i] >= 0 && targets[i] < 256, "byte token ids");
    }
  }
  return 0;
}
