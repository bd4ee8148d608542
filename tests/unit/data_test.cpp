// Data loading: IDX round trips (plain and gzipped), NumPy .npy files, each kind of bad file giving one
// clear error that names it, the real Fashion-MNIST from Debian's package, the batch order and the text corpus.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "mantissa/data/datasets.h"
#include "mantissa/train/data.h"
#include "source_scan.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("mantissa_data_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

IdxArray sample_array() {
  IdxArray a{{3, 2, 4}, {}};
  for (int i = 0; i < 24; ++i) a.data.push_back(static_cast<std::uint8_t>(i * 10));
  return a;
}

// `read` (read_idx, read_array) refuses the file with one line naming it and saying `fragment`.
void expect_data_error(const fs::path& p, const std::string& fragment, IdxArray (*read)(const fs::path&) = read_idx) {
  try {
    read(p);
    FAIL() << "no error for " << p;
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(p.string()), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

TEST(Idx, RoundTripsPlainAndGzipped) {
  const fs::path d = temp_dir();
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    write_idx(d / name, sample_array());
    const IdxArray b = read_idx(d / name);
    EXPECT_EQ(b.dims, sample_array().dims);
    EXPECT_EQ(b.data, sample_array().data);
  }
  fs::remove_all(d);
}

TEST(Idx, BadFilesGiveOneLineNamingTheFile) {
  const fs::path d = temp_dir();
  expect_data_error(d / "missing.idx", "no such file");
  std::ofstream(d / "magic.idx", std::ios::binary) << "PK\x03\x04 not idx";
  expect_data_error(d / "magic.idx", "bad magic");
  {
    std::ofstream f(d / "type.idx", std::ios::binary);
    const char h[] = {0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0};
    f.write(h, sizeof h);
  }
  expect_data_error(d / "type.idx", "IDX element type 0x0d is not supported");
  write_idx(d / "whole.idx", sample_array());
  fs::resize_file(d / "whole.idx", fs::file_size(d / "whole.idx") - 5);
  expect_data_error(d / "whole.idx", "truncated");
  write_idx(d / "extra.idx", sample_array());
  std::ofstream(d / "extra.idx", std::ios::binary | std::ios::app) << "junk";
  expect_data_error(d / "extra.idx", "after the data");
  // A gzip stream with its middle overwritten.
  IdxArray big{{4096}, std::vector<std::uint8_t>(4096)};
  for (std::size_t i = 0; i < big.data.size(); ++i) big.data[i] = static_cast<std::uint8_t>(i * 7919 % 251);
  write_idx(d / "bad.idx.gz", big);
  {
    std::fstream f(d / "bad.idx.gz", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(40);
    f.write("\xff\xff\xff\xff\xff\xff\xff\xff", 8);
  }
  try {
    read_idx(d / "bad.idx.gz");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.idx.gz"), std::string::npos) << e.what();
  }
  // A header claiming 16 GiB over a 16-byte file: refused as truncated after reading what is there (the
  // array grows with the data, so nothing near 16 GiB is allocated).
  {
    std::ofstream f(d / "claims.idx", std::ios::binary);
    const char h[] = {0, 0, 0x08, 3, static_cast<char>(0x80), 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 1};
    f.write(h, sizeof h);
  }
  expect_data_error(d / "claims.idx", "ends after 0 of the 17179869184 bytes");
  // Dimensions 2^31 x 7 x 2^31 x 1: the count (7 * 2^93) is refused before it can wrap (found by
  // fuzz_idx: the product wrapped to 0 in int64 before the size check, and an empty array came back).
  {
    std::ofstream f(d / "wraps.idx", std::ios::binary);
    const char h[] = {0, 0, 0x08, 4, static_cast<char>(0x80), 0, 0, 0, 0, 0, 0, 7,
                      static_cast<char>(0x80), 0, 0, 0, 0, 0, 0, 1};
    f.write(h, sizeof h);
  }
  expect_data_error(d / "wraps.idx", "larger than 16 GiB");
  EXPECT_THROW(load_mnist_format(d / "nowhere", true), DataError);
  EXPECT_THROW(load_mnist_format(d, true), DataError);  // a directory without the files
  fs::remove_all(d);
}

// A .npy file as numpy.save writes one (version 1: the header padded with spaces to a multiple of 64 bytes,
// ending in a newline), with a header of one's own choosing.
void write_npy(const fs::path& p, const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(p, std::ios::binary);
  f << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size() & 0xFF) << static_cast<char>(header.size() >> 8) << header << data;
}

TEST(Npy, ReadsBytesAndIntegerLabelsAndTellsTheFormatByItsFirstBytes) {
  const fs::path d = temp_dir();
  std::string pixels;
  for (int i = 0; i < 24; ++i) pixels += static_cast<char>(i * 10);
  write_npy(d / "images.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2, 4), }", pixels);
  const IdxArray a = read_array(d / "images.npy");
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{3, 2, 4}));
  EXPECT_EQ(a.data, sample_array().data);
  // int64 labels, as numpy keeps them: little-endian, 8 bytes each.
  std::string labels;
  for (const std::int64_t v : {7, 0, 255}) {
    for (int b = 0; b < 8; ++b) labels += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * b)) & 0xFF);
  }
  write_npy(d / "labels.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", labels);
  EXPECT_EQ(read_array(d / "labels.npy").data, (std::vector<std::uint8_t>{7, 0, 255}));
  // The same door reads IDX.
  write_idx(d / "images.idx.gz", sample_array());
  EXPECT_EQ(read_array(d / "images.idx.gz").data, sample_array().data);
}

TEST(Npy, BadFilesGiveOneLineNamingTheFile) {
  const fs::path d = temp_dir();
  const std::string ok = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }";
  write_npy(d / "float.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "abcd");
  expect_data_error(d / "float.npy", "elements of type '<f4'", read_array);
  write_npy(d / "big_endian.npy", "{'descr': '>i4', 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0'));
  expect_data_error(d / "big_endian.npy", "'>i4'", read_array);
  write_npy(d / "fortran.npy", "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 2), }", "abcd");
  expect_data_error(d / "fortran.npy", "Fortran order", read_array);
  write_npy(d / "short.npy", ok, "abc");
  expect_data_error(d / "short.npy", "holds 3 bytes of data where its shape needs 4", read_array);
  write_npy(d / "negative.npy", "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", std::string("\x01\x00\xfe\xff", 4));
  expect_data_error(d / "negative.npy", "value -2 at flat index 1 is not 0..255", read_array);
  write_npy(d / "large.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }", std::string("\x2c\x01", 2));
  expect_data_error(d / "large.npy", "value 300 at flat index 0", read_array);
  write_npy(d / "scalar.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (), }", "a");
  expect_data_error(d / "scalar.npy", "0 dimensions", read_array);
  write_npy(d / "header.npy", "{'descr': '|u1', 'shape': (2, 2x), }", "abcd");
  expect_data_error(d / "header.npy", "not a .npy header", read_array);
  write_npy(d / "zero.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 2), }", "");
  expect_data_error(d / "zero.npy", "a dimension of 0", read_array);
  write_npy(d / "cut.npy", ok, "abcd");
  fs::resize_file(d / "cut.npy", 20);
  expect_data_error(d / "cut.npy", "truncated in the header", read_array);
  expect_data_error(d / "missing.npy", "no such file", read_array);
}

TEST(FashionMnist, LoadsFromDebiansPackage) {
  ASSERT_TRUE(fs::exists(kFashionMnistDir)) << "scripts/install-deps.sh installs dataset-fashion-mnist";
  const ImageDataset train = load_mnist_format(kFashionMnistDir, true);
  const ImageDataset test = load_mnist_format(kFashionMnistDir, false);
  EXPECT_EQ(train.images.shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(test.images.shape(), (Shape{10000, 1, 28, 28}));
  std::vector<int> per_class(10, 0);
  for (std::int64_t l : train.labels) ++per_class[static_cast<std::size_t>(l)];
  for (int c : per_class) EXPECT_EQ(c, 6000);  // Fashion-MNIST is balanced
  // Normalized with the training set's statistics: mean 0, standard deviation 1 (to 3 decimals).
  const float* px = train.images.data_as<float>();
  double s = 0, s2 = 0;
  const auto n = static_cast<double>(train.images.numel());
  for (std::int64_t i = 0; i < train.images.numel(); ++i) {
    s += px[i];
    s2 += static_cast<double>(px[i]) * px[i];
  }
  EXPECT_NEAR(s / n, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(s2 / n - (s / n) * (s / n)), 1.0, 1e-3);
}

TEST(BatchOrder, CoversEveryItemOncePerEpochAndRepeatsWithTheSeed) {
  BatchOrder a(10, 4, 7);
  BatchOrder b(10, 4, 7);
  std::set<std::int64_t> seen;
  std::vector<std::int64_t> epoch0;
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::int64_t> x = a.next();
    EXPECT_EQ(x, b.next());
    seen.insert(x.begin(), x.end());
    epoch0.insert(epoch0.end(), x.begin(), x.end());
  }
  EXPECT_EQ(seen.size(), 10U);
  std::vector<std::int64_t> epoch1;
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::int64_t> x = a.next();
    epoch1.insert(epoch1.end(), x.begin(), x.end());
  }
  EXPECT_NE(epoch0, epoch1);
  BatchOrder c(10, 4, 7);
  c.seek(1, 4);  // resume mid-epoch
  EXPECT_EQ(c.next(), std::vector<std::int64_t>(epoch1.begin() + 4, epoch1.begin() + 8));
}

TEST(TextCorpus, LoadsTheFortunesAndSamplesNextByteTargets) {
  ASSERT_TRUE(fs::exists(kFortunesDir)) << "scripts/install-deps.sh installs fortunes";
  const TextCorpus c = TextCorpus::load(kFortunesDir);
  EXPECT_GT(c.train.size(), 1'000'000U);
  EXPECT_NEAR(static_cast<double>(c.validation.size()) / static_cast<double>(c.train.size() + c.validation.size()), 0.1, 1e-3);
  std::mt19937_64 rng(3);
  std::vector<std::int64_t> in, out;
  TextCorpus::sample(c.train, 4, 16, rng, in, out);
  ASSERT_EQ(in.size(), 64U);
  for (int b = 0; b < 4; ++b) {
    for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(out[static_cast<std::size_t>(b * 16 + t)], in[static_cast<std::size_t>(b * 16 + t + 1)]);
  }
  EXPECT_THROW(TextCorpus::load("/nonexistent/text"), DataError);
  try {  // a device would be read until memory ran out
    TextCorpus::load("/dev/zero");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/zero: not a regular file"), std::string::npos) << e.what();
  }
}

// What a text model is given that is not plain text: gzip is read as the text it holds (a file or a
// directory of them, whatever the name); other compressed formats and binary data are one clear error
// each, not a run on their bytes (which reaches val loss ln 256 and learns nothing).
TEST(TextCorpus, ReadsGzipAsTextAndRefusesOtherCompressionAndBinaryData) {
  const fs::path d = temp_dir() / "text";
  fs::create_directories(d / "gz");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of a small corpus\n";
  std::ofstream(d / "plain.txt") << text;
  std::ofstream(d / "half.txt") << text.substr(0, 3000);
  ASSERT_EQ(std::system(("gzip -c " + (d / "plain.txt").string() + " > " + (d / "gz/a.gz").string() + " && gzip -c " +
                         (d / "half.txt").string() + " > " + (d / "gz/b").string() + " && cat " + (d / "gz/a.gz").string() + " " +
                         (d / "gz/b").string() + " > " + (d / "two-members.gz").string()).c_str()),
            0);
  const auto all = [](const TextCorpus& c) {
    std::string s(c.train.begin(), c.train.end());
    return s + std::string(c.validation.begin(), c.validation.end());
  };
  EXPECT_EQ(all(TextCorpus::load(d / "gz/a.gz")), text);
  EXPECT_EQ(all(TextCorpus::load(d / "gz")), text + text.substr(0, 3000));  // b has no .gz: read by its contents
  EXPECT_EQ(all(TextCorpus::load(d / "two-members.gz")), text + text.substr(0, 3000));
  const auto refusal = [](const fs::path& p) {
    try {
      TextCorpus::load(p);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  std::string bz = "BZh91AY&SY";
  bz.resize(2000, 'x');
  std::ofstream(d / "c.bz2") << bz;
  EXPECT_EQ(refusal(d / "c.bz2"), (d / "c.bz2").string() + ": bzip2-compressed, not text: decompress it first (gzip files are read as they are)");
  std::string binary = text;
  binary[100] = '\0';
  std::ofstream(d / "bin") << binary;
  EXPECT_NE(refusal(d / "bin").find("bin: binary data, not text (1 control bytes, the first byte 0x00 at offset 100)"), std::string::npos)
      << refusal(d / "bin");
  // The image set's directory given to a text model: its IDX files, inflated, are binary.
  EXPECT_NE(refusal(kFashionMnistDir).find("binary data, not text"), std::string::npos) << refusal(kFashionMnistDir);
  const std::string gz = [&] {
    std::ifstream f(d / "gz/a.gz", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  std::ofstream(d / "torn.gz", std::ios::binary) << gz.substr(0, gz.size() / 2);
  EXPECT_NE(refusal(d / "torn.gz").find("torn.gz: corrupt gzip data"), std::string::npos) << refusal(d / "torn.gz");
  fs::remove_all(d);
}

TEST(TextStreams, CutsParallelStreamsIntoConsecutiveSegments) {
  TextCorpus corpus;
  for (int i = 0; i < 200; ++i) corpus.train.push_back(static_cast<std::uint8_t>(i));
  for (int i = 0; i < 100; ++i) corpus.validation.push_back(static_cast<std::uint8_t>(100 + i));
  // 4 streams of 50 bytes: (50 - 1) / 10 = 4 segments of 10 tokens (the last needs one more byte).
  train::TextStreams s(corpus, 4, 10, 2, "test text");
  for (int round = 0; round < 2; ++round) {
    for (std::int64_t k = 0; k < 4; ++k) {
      const train::Batch b = s.next();
      ASSERT_EQ(b.rows, 4);
      ASSERT_EQ(b.length, 10);
      EXPECT_EQ(b.stream, 0);
      EXPECT_EQ(b.stream_start, k == 0);  // the streams start again after the last segment
      for (std::int64_t r = 0; r < 4; ++r) {
        for (std::int64_t i = 0; i < 10; ++i) {
          const auto at = static_cast<std::size_t>(r * 10 + i);
          EXPECT_EQ(b.tokens[at], r * 50 + k * 10 + i);
          EXPECT_EQ(b.targets[at], b.tokens[at] + 1);
        }
      }
    }
  }
  s.next();
  const auto pos = s.position();
  const train::Batch after = s.next();
  s.seek(pos);
  EXPECT_EQ(s.next().tokens, after.tokens);
  EXPECT_THROW(s.seek({{"text_segment", "4"}}), std::invalid_argument);
  EXPECT_THROW(s.seek({{"text_segment", "1x"}}), std::invalid_argument);
  std::vector<train::Batch> eval;
  s.for_each_eval_batch(false, [&](const train::Batch& b) { eval.push_back(b); });
  ASSERT_EQ(eval.size(), 2U);  // 4 validation streams of 25 bytes: 2 segments
  EXPECT_EQ(eval[0].stream, 1);
  EXPECT_TRUE(eval[0].stream_start);
  EXPECT_FALSE(eval[1].stream_start);
  EXPECT_EQ(eval[1].tokens[0], 100 + 10);
  try {
    train::TextStreams too_short(corpus, 4, 60, 2, "short.txt");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("short.txt: 200 bytes of training text"), std::string::npos) << e.what();
  }
}

// An array file is opened once: read_array looks at its first bytes and hands the same descriptor to
// the reader of its kind (it opened the file twice, and a file replaced in between was read as the other
// kind). Only open_array_file opens one.
TEST(ReadArray, ArrayFilesAreOpenedOnlyByOpenArrayFile) {
  const testing::SourceScan scan = testing::scan_sources({"InputFile"}, true, {}, [](std::string_view s) {
    return s.find("kMaxIdxBytes") != std::string_view::npos;
  });
  EXPECT_GT(scan.files, 100);
  ASSERT_EQ(scan.matches.size(), 1U) << ::testing::PrintToString(scan.matches);
  EXPECT_EQ(scan.matches[0].rfind("src/data/idx.cpp:", 0), 0U) << scan.matches[0];
}

}  // namespace
}  // namespace mantissa
