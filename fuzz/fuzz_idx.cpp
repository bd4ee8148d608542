// Fuzzes the array readers (read_array: IDX, plain or gzipped, or NumPy .npy, told by the first bytes) and
// the image data set built from two such files (load_mnist_format). The first input byte picks which: even,
// the rest is one file; odd, the next two bytes say where the rest splits into an images file and a labels file.
// A file read without error must hold exactly the bytes its header describes, and write back and read
// again to the same array.
#include <algorithm>
#include <cstring>
#include <functional>

#include "fuzz_target.h"
#include "mantissa/data/datasets.h"

namespace {

using mantissa::fuzz::require;

void check_array(const mantissa::IdxArray& a) {
  require(!a.dims.empty() && a.dims.size() <= 4, "rank in 1..4");
  std::int64_t count = 1;
  for (std::int64_t d : a.dims) {
    require(d > 0, "positive dimensions");
    count *= d;
  }
  require(static_cast<std::size_t>(count) == a.data.size(), "data size equals the product of the dimensions");
}

void fuzz_one_file(const std::uint8_t* data, std::size_t size) {
  const auto path = mantissa::fuzz::write_scratch("input.idx", data, size);
  mantissa::IdxArray a;
  try {
    a = mantissa::read_array(path);
  } catch (const mantissa::DataError&) {
    return;
  }
  check_array(a);
  if (a.data.size() > (1u << 16)) return;  // the round trip below is for small arrays (speed)
  const auto copy = mantissa::fuzz::scratch_dir() / "copy.idx.gz";
  mantissa::write_idx(copy, a);
  const mantissa::IdxArray b = mantissa::read_idx(copy);
  require(a.dims == b.dims && a.data == b.data, "write_idx then read_idx gives the same array");
}

void fuzz_dataset(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return;
  const std::size_t split = std::min<std::size_t>((std::size_t{data[0]} << 8 | data[1]), size - 2);
  const auto dir = mantissa::fuzz::scratch_dir() / "mnist";
  std::filesystem::create_directories(dir);
  const std::uint8_t* rest = data + 2;
  std::ofstream(dir / "train-images-idx3-ubyte", std::ios::binary)
      .write(reinterpret_cast<const char*>(rest), static_cast<std::streamsize>(split));
  std::ofstream(dir / "train-labels-idx1-ubyte", std::ios::binary)
      .write(reinterpret_cast<const char*>(rest + split), static_cast<std::streamsize>(size - 2 - split));
  mantissa::ImageDataset d;
  try {
    d = mantissa::load_mnist_format(dir, /*train=*/true);
  } catch (const mantissa::DataError&) {
    return;
  }
  require(d.size() > 0 && d.images.size(0) == d.size(), "one label per image");
  require(d.classes >= 1 && d.classes <= 256, "classes in 1..256");
  for (std::int64_t label : d.labels) require(label >= 0 && label < d.classes, "labels below the class count");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    fuzz_one_file(data + 1, size - 1);
  } else {
    fuzz_dataset(data + 1, size - 1);
  }
  return 0;
}
