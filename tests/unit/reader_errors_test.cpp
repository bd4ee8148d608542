// Every reader of what users hand mantissa throws only its own error kind (mantissa/base/errors.h), with
// the file named: each is fed the fuzz targets' committed corpus and a fixed set of mutations of it (bytes
// flipped, files cut short, numbers made 32 digits long), and any other exception type that escapes is a
// failure. A reader that lets a helper's error through (parse_number's UsageError, a filesystem_error,
// nlohmann's parse_error) fails here, whichever reader and whichever helper.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "mantissa/data/datasets.h"
#include "mantissa/io/checkpoint.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/nn/layers.h"
#include "mantissa/optim/optimizer.h"
#include "../common/scratch_dir.h"

namespace mantissa {
namespace {

using Bytes = std::vector<std::uint8_t>;

// A scratch directory for one test, removed at its end.
struct Scratch {
  explicit Scratch(const std::string& name) : dir(testing::scratch_dir(name)) {}
  ~Scratch() { std::filesystem::remove_all(dir); }
  const std::filesystem::path& path() const { return dir; }
  std::filesystem::path dir;
};

Bytes read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::filesystem::path& p, const Bytes& b) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<Bytes> corpus(const std::string& target) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(MANTISSA_SOURCE_DIR) / "fuzz" / "corpus" / target)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Bytes> out;
  for (const auto& f : files) out.push_back(read_bytes(f));
  return out;
}

// The array files in the idx target's corpus: its first byte picks one file (even; the file follows) or
// an image set (odd; two bytes say where the images file ends and the labels file begins).
std::vector<Bytes> array_files() {
  std::vector<Bytes> out;
  for (const Bytes& input : corpus("idx")) {
    if (input.empty()) continue;
    if (input[0] % 2 == 0) {
      out.emplace_back(input.begin() + 1, input.end());
    } else if (input.size() >= 3) {
      const std::size_t split = std::min<std::size_t>(std::size_t{input[1]} << 8 | input[2], input.size() - 3);
      out.emplace_back(input.begin() + 3, input.begin() + 3 + static_cast<std::ptrdiff_t>(split));
      out.emplace_back(input.begin() + 3 + static_cast<std::ptrdiff_t>(split), input.end());
    }
  }
  return out;
}

// `count` mutants of `original` from a fixed seed: the same on every run. Half of the edits fall in the
// first `head` bytes (where the headers are).
std::vector<Bytes> mutants(const Bytes& original, int count, std::uint64_t seed, std::size_t head = 64) {
  std::mt19937_64 rng(seed);
  const auto below = [&](std::size_t n) { return n == 0 ? std::size_t{0} : static_cast<std::size_t>(rng() % n); };
  std::vector<Bytes> out;
  for (int i = 0; i < count; ++i) {
    Bytes b = original;
    const std::size_t span = (rng() % 2 == 0) ? std::min(head, b.size()) : b.size();
    switch (rng() % 6) {
      case 0:  // flip a few bits
        for (int k = 0; k < 3 && !b.empty(); ++k) b[below(span)] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // cut short
        b.resize(below(b.size() + 1));
        break;
      case 2: {  // a number too long for any integer type
        const std::string digits(32, '9');
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(below(span + 1)), digits.begin(), digits.end());
        break;
      }
      case 3:  // a byte set to an extreme
        if (!b.empty()) b[below(span)] = (rng() % 2) ? 0xff : 0x00;
        break;
      case 4: {  // every digit in the head made a 9 (sizes, dimensions, offsets grow)
        for (std::size_t k = 0; k < span; ++k) {
          if (b[k] >= '0' && b[k] <= '8' && rng() % 2) b[k] = '9';
        }
        break;
      }
      default: {  // a slice repeated
        const std::size_t from = below(b.size()), len = below(std::min<std::size_t>(b.size() - from, 32) + 1);
        const Bytes slice(b.begin() + static_cast<std::ptrdiff_t>(from), b.begin() + static_cast<std::ptrdiff_t>(from + len));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(below(b.size() + 1)), slice.begin(), slice.end());
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

// Runs read on every input written to `path`: a refusal must be an E naming `named` (the path, or the
// directory); any other exception fails the test, with its type.
template <class E>
void expect_only(const char* reader, const std::vector<Bytes>& inputs, const std::filesystem::path& path,
                 const std::function<void()>& read, const std::string& named) {
  int refused = 0, other = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    write_bytes(path, inputs[i]);
    try {
      read();
    } catch (const E& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << reader << " input " << i << ": " << e.what();
    } catch (const std::exception& e) {
      ++other;
      ADD_FAILURE() << reader << " input " << i << ": " << typeid(e).name() << " escaped (not " << typeid(E).name()
                    << "): " << e.what();
    }
  }
  EXPECT_GT(refused, 0) << reader << ": no input was refused (the mutations do nothing?)";
  EXPECT_EQ(other, 0) << reader;
}

std::vector<Bytes> with_mutants(const std::vector<Bytes>& seeds, int per_seed, std::uint64_t seed) {
  std::vector<Bytes> all;
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    all.push_back(seeds[i]);
    for (Bytes& m : mutants(seeds[i], per_seed, seed + i)) all.push_back(std::move(m));
  }
  return all;
}

TEST(ReaderErrors, ArrayFilesThrowOnlyDataError) {
  Scratch dir("reader-errors-array");
  const std::filesystem::path path = dir.path() / "input.bin";
  const std::vector<Bytes> inputs = with_mutants(array_files(), 40, 1);
  expect_only<DataError>("read_array", inputs, path, [&] { (void)read_array(path); }, path.string());
  expect_only<DataError>("read_idx", inputs, path, [&] { (void)read_idx(path); }, path.string());
  expect_only<DataError>("read_npy", inputs, path, [&] { (void)read_npy(path); }, path.string());
}

TEST(ReaderErrors, ANpyDimensionOf32DigitsIsADataErrorNamingTheFile) {
  Scratch dir("reader-errors-npy");
  const std::filesystem::path path = dir.path() / "x_train.npy";
  std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (" + std::string(32, '7') + ", 2), }";
  header.append(64 - (10 + header.size()) % 64, ' ');
  header.back() = '\n';
  const std::string file = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header;
  write_bytes(path, Bytes(file.begin(), file.end()));
  try {
    (void)read_array(path);
    FAIL() << "a 32-digit dimension was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST(ReaderErrors, ImageSetsThrowOnlyDataError) {
  Scratch dir("reader-errors-mnist");
  IdxArray images{{3, 4, 4}, Bytes(48, 7)}, labels{{3}, {0, 1, 2}};
  const std::filesystem::path image_path = dir.path() / "train-images-idx3-ubyte";
  const std::filesystem::path label_path = dir.path() / "train-labels-idx1-ubyte";
  write_idx(image_path, images);
  write_idx(label_path, labels);
  const Bytes good_labels = read_bytes(label_path), good_images = read_bytes(image_path);
  const auto load = [&] { (void)load_mnist_format(dir.path(), /*train=*/true); };
  expect_only<DataError>("load_mnist_format (images)", with_mutants({good_images}, 200, 2), image_path, load, dir.path().string());
  write_bytes(image_path, good_images);
  expect_only<DataError>("load_mnist_format (labels)", with_mutants({good_labels}, 200, 3), label_path, load, dir.path().string());
}

TEST(ReaderErrors, TextCorporaThrowOnlyDataError) {
  Scratch dir("reader-errors-text");
  const std::filesystem::path path = dir.path() / "text.txt";
  std::vector<Bytes> inputs = with_mutants(corpus("text"), 40, 4);
  inputs.push_back({});  // an empty file: refused
  expect_only<DataError>("TextCorpus::load", inputs, path, [&] { (void)TextCorpus::load(path, 0.1); }, path.string());
}

TEST(ReaderErrors, SafetensorsFilesThrowOnlyCheckpointError) {
  Scratch dir("reader-errors-safetensors");
  const std::filesystem::path path = dir.path() / "weights.safetensors";
  expect_only<CheckpointError>("read_safetensors", with_mutants(corpus("safetensors"), 60, 5), path,
                               [&] { (void)read_safetensors(path); }, path.string());
}

// Found by the fuzz check (issue 54): a data offset written as a JSON float, 2e54, was cast to uint64
// (undefined; UBSan stopped the reader). Numbers in JSON are read through json_value, which refuses it.
TEST(ReaderErrors, ASafetensorsOffsetThatIsNoIntegerIsACheckpointErrorNamingTheFile) {
  Scratch dir("reader-errors-offset");
  const std::filesystem::path path = dir.path() / "w.safetensors";
  for (const std::string offsets : {"[0,2e54]", "[0,12.5]", "[-4,12]", "[0,18446744073709551616]"}) {
    std::string header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":)" + offsets + "}}";
    header.append(8 - header.size() % 8, ' ');
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    file += header + std::string(12, '\0');
    write_bytes(path, Bytes(file.begin(), file.end()));
    try {
      (void)read_safetensors(path);
      ADD_FAILURE() << offsets << " was read";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("data_offsets"), std::string::npos) << e.what();
    }
  }
}

TEST(ReaderErrors, CheckpointsThrowOnlyCheckpointError) {
  Scratch dir("reader-errors-checkpoint");
  const std::filesystem::path path = dir.path() / "ckpt-3.safetensors";
  nn::Linear model(4, 3, 1);
  Adam opt(model.parameters(), {}, /*decoupled=*/true);
  CheckpointState state;
  state.step = 3;
  save_checkpoint(path, model, opt, state);
  const Bytes good = read_bytes(path);
  // The mutations land in the JSON header (its length is the first 8 bytes), where the metadata is.
  std::size_t header = 0;
  for (int i = 0; i < 8; ++i) header |= std::size_t{good[static_cast<std::size_t>(i)]} << (8 * i);
  std::vector<Bytes> inputs{good};
  for (Bytes& m : mutants(good, 300, 6, 8 + header)) inputs.push_back(std::move(m));
  expect_only<CheckpointError>("load_checkpoint", inputs, path, [&] {
    nn::Linear fresh(4, 3, 1);
    Adam fresh_opt(fresh.parameters(), {}, true);
    (void)load_checkpoint(path, fresh, fresh_opt);
  }, path.string());
}

}  // namespace
}  // namespace mantissa
