// The data sources of the trainer; see mantissa/train/data.h.
#include "mantissa/train/data.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "mantissa/numeric/parse_number.h"

namespace mantissa::train {
namespace {

std::int64_t integer_field(const std::map<std::string, std::string>& m, const std::string& key) {
  const auto it = m.find(key);
  if (it == m.end()) throw std::invalid_argument("has no '" + key + "' in its metadata");
  return parse_number<std::int64_t>(std::string_view(it->second).substr(0, 40), "metadata '" + key + "'");
}

// The CRC-32 of byte ranges, in order (zlib takes at most 2^32 - 1 bytes a call).
std::uint32_t crc_of(std::initializer_list<std::span<const std::uint8_t>> parts) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const std::span<const std::uint8_t> part : parts) {
    for (std::size_t at = 0; at < part.size(); at += 1u << 30) {
      crc = crc32(crc, part.data() + at, static_cast<uInt>(std::min<std::size_t>(part.size() - at, 1u << 30)));
    }
  }
  return static_cast<std::uint32_t>(crc);
}

std::span<const std::uint8_t> bytes_of(const ImageDataset& d) {
  return {static_cast<const std::uint8_t*>(d.images.data()), static_cast<std::size_t>(d.images.numel()) * dtype_size(d.images.dtype())};
}

std::span<const std::uint8_t> bytes_of(const std::vector<std::int64_t>& labels) {
  return {reinterpret_cast<const std::uint8_t*>(labels.data()), labels.size() * sizeof(std::int64_t)};
}

std::string identity_text(std::int64_t train, std::int64_t held_out, const char* unit, std::uint32_t crc) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return std::to_string(train) + " + " + std::to_string(held_out) + " " + unit + ", crc32 " + hex;
}

std::string text_identity(const TextCorpus& c) {
  return identity_text(static_cast<std::int64_t>(c.train.size()), static_cast<std::int64_t>(c.validation.size()), "bytes",
                       crc_of({c.train, c.validation}));
}

}  // namespace

std::string ClassificationData::identity() const {
  return identity_text(train_.size(), test_.size(), "examples",
                       crc_of({bytes_of(train_), bytes_of(train_.labels), bytes_of(test_), bytes_of(test_.labels)}));
}

std::string SegmentationData::identity() const { return images_.identity() + ", object threshold " + std::to_string(threshold_); }

std::string TextData::identity() const { return text_identity(corpus_); }

std::string TextStreams::identity() const { return text_identity(corpus_); }

ClassificationData::ClassificationData(ImageDataset train, ImageDataset test, std::int64_t batch_size,
                                       std::uint64_t seed, bool shuffle)
    : train_(std::move(train)), test_(std::move(test)), order_(train_.size(), batch_size, seed, shuffle) {}

Batch ClassificationData::next() {
  const std::vector<std::int64_t> idx = order_.next();
  Batch b;
  for (std::int64_t i : idx) b.targets.push_back(train_.labels[static_cast<std::size_t>(i)]);
  b.inputs = gather_rows(train_.images, idx);
  return b;
}

void ClassificationData::for_each_eval_batch(bool full, const std::function<void(const Batch&)>& each) {
  const std::int64_t n = full ? test_.size() : std::min<std::int64_t>(test_.size(), 2000);
  for (std::int64_t at = 0; at < n; at += 500) {
    std::vector<std::int64_t> idx;
    Batch b;
    for (std::int64_t i = at; i < std::min(n, at + 500); ++i) {
      idx.push_back(i);
      b.targets.push_back(test_.labels[static_cast<std::size_t>(i)]);
    }
    b.inputs = gather_rows(test_.images, idx);
    each(b);
  }
}

SegmentationData::SegmentationData(ImageDataset train, ImageDataset test, std::int64_t batch_size, std::uint64_t seed,
                                   double threshold)
    : images_(std::move(train), std::move(test), batch_size, seed), threshold_(threshold) {}

Batch SegmentationData::per_pixel(Batch b) const {
  const Tensor x = contiguous(cast(b.inputs, DType::f32));
  const std::int64_t n = x.size(0), channels = x.size(1), plane = x.size(2) * x.size(3);
  const float* v = x.data_as<float>();
  std::vector<std::int64_t> targets(static_cast<std::size_t>(n * plane));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t p = 0; p < plane; ++p) {
      double sum = 0;  // the pixel's mean over the channels
      for (std::int64_t c = 0; c < channels; ++c) sum += v[(i * channels + c) * plane + p];
      const bool object = sum / static_cast<double>(channels) > threshold_;
      targets[static_cast<std::size_t>(i * plane + p)] = object ? b.targets[static_cast<std::size_t>(i)] + 1 : 0;
    }
  }
  b.targets = std::move(targets);
  return b;
}

Batch SegmentationData::next() { return per_pixel(images_.next()); }

void SegmentationData::for_each_eval_batch(bool full, const std::function<void(const Batch&)>& each) {
  images_.for_each_eval_batch(full, [&](const Batch& b) { each(per_pixel(b)); });
}

std::map<std::string, std::string> ClassificationData::position() const {
  return {{"data_epoch", std::to_string(order_.epoch())}, {"data_position", std::to_string(order_.position())}};
}

void ClassificationData::seek(const std::map<std::string, std::string>& p) {
  order_.seek(integer_field(p, "data_epoch"), integer_field(p, "data_position"));
}

double byte_entropy_of(std::span<const std::uint8_t> text) {
  std::array<std::int64_t, 256> counts{};
  for (const std::uint8_t b : text) ++counts[b];
  double h = 0;
  const auto n = static_cast<double>(text.size());
  for (const std::int64_t c : counts) {
    if (c > 0) h -= static_cast<double>(c) / n * std::log(static_cast<double>(c) / n);
  }
  return h;
}

TextData::TextData(TextCorpus corpus, std::int64_t batch_size, std::int64_t block, std::uint64_t seed,
                   std::int64_t eval_batches, const std::string& name)
    : corpus_(std::move(corpus)), entropy_(byte_entropy_of(corpus_.train)), batch_(batch_size), block_(block), eval_batches_(eval_batches), seed_(seed), rng_(seed) {
  // Checked now, not at the first evaluation: each split must hold one window of block + 1 bytes.
  for (const auto& [split, bytes] : {std::pair<const char*, std::size_t>{"training", corpus_.train.size()},
                                     {"validation", corpus_.validation.size()}}) {
    if (static_cast<std::int64_t>(bytes) <= block) {
      throw DataError(name + ": the " + split + " text (" + std::to_string(bytes) + " bytes) is shorter than one window of " +
                      std::to_string(block + 1) + " bytes (the block length + 1); use more text or a shorter block");
    }
  }
}

Batch TextData::window_batch(std::span<const std::uint8_t> text, std::mt19937_64& rng) const {
  Batch b;
  b.rows = batch_;
  b.length = block_;
  TextCorpus::sample(text, batch_, block_, rng, b.tokens, b.targets);
  return b;
}

Batch TextData::next() { return window_batch(corpus_.train, rng_); }

void TextData::for_each_eval_batch(bool /*full*/, const std::function<void(const Batch&)>& each) {
  std::mt19937_64 rng(seed_ + 1000);  // the same validation windows every time
  for (std::int64_t i = 0; i < eval_batches_; ++i) each(window_batch(corpus_.validation, rng));
}

std::map<std::string, std::string> TextData::position() const {
  std::ostringstream out;
  out << rng_;
  return {{"text_rng", out.str()}};
}

void TextData::seek(const std::map<std::string, std::string>& p) {
  const auto it = p.find("text_rng");
  if (it == p.end()) throw std::invalid_argument("has no 'text_rng' in its metadata");
  std::istringstream in(it->second);
  std::mt19937_64 rng;
  in >> rng;
  if (!in) throw std::invalid_argument("metadata 'text_rng' is not a generator state");
  rng_ = rng;
}

TextStreams::TextStreams(TextCorpus corpus, std::int64_t batch_size, std::int64_t bptt, std::int64_t eval_batches,
                         const std::string& name)
    : corpus_(std::move(corpus)), entropy_(byte_entropy_of(corpus_.train)), batch_(batch_size), bptt_(bptt),
      eval_batches_(eval_batches) {
  if (batch_ < 1 || bptt_ < 1 || eval_batches_ < 1) {
    throw std::invalid_argument("text streams: batch size, segment length and evaluation batches must be at least 1");
  }
  for (const auto* split : {&corpus_.train, &corpus_.validation}) {
    if (segments(*split) < 1) {
      throw DataError(name + ": " + std::to_string(split->size()) + " bytes of " +
                      (split == &corpus_.train ? "training" : "validation") + " text cannot make " +
                      std::to_string(batch_) + " streams of a " + std::to_string(bptt_ + 1) +
                      "-byte segment; give more text, a smaller --batch-size or a shorter --bptt");
    }
  }
}

std::int64_t TextStreams::segments(std::span<const std::uint8_t> text) const {
  const auto per_stream = static_cast<std::int64_t>(text.size()) / batch_;
  return (per_stream - 1) / bptt_;
}

Batch TextStreams::segment(std::span<const std::uint8_t> text, std::int64_t k, int stream) const {
  Batch b;
  b.rows = batch_;
  b.length = bptt_;
  b.stream = stream;
  b.stream_start = k == 0;
  const std::int64_t per_stream = static_cast<std::int64_t>(text.size()) / batch_;
  b.tokens.reserve(static_cast<std::size_t>(batch_ * bptt_));
  b.targets.reserve(static_cast<std::size_t>(batch_ * bptt_));
  for (std::int64_t r = 0; r < batch_; ++r) {
    const std::uint8_t* at = text.data() + r * per_stream + k * bptt_;
    for (std::int64_t i = 0; i < bptt_; ++i) {
      b.tokens.push_back(at[i]);
      b.targets.push_back(at[i + 1]);
    }
  }
  return b;
}

Batch TextStreams::next() {
  const Batch b = segment(corpus_.train, next_, 0);
  next_ = (next_ + 1) % segments(corpus_.train);
  return b;
}

void TextStreams::for_each_eval_batch(bool /*full*/, const std::function<void(const Batch&)>& each) {
  const std::int64_t n = std::min(eval_batches_, segments(corpus_.validation));
  for (std::int64_t k = 0; k < n; ++k) each(segment(corpus_.validation, k, 1));
}

std::map<std::string, std::string> TextStreams::position() const { return {{"text_segment", std::to_string(next_)}}; }

void TextStreams::seek(const std::map<std::string, std::string>& p) {
  const std::int64_t k = integer_field(p, "text_segment");
  if (k < 0 || k >= segments(corpus_.train)) {
    throw std::invalid_argument("metadata 'text_segment' " + std::to_string(k) + " is not a segment of these streams");
  }
  next_ = k;
}

}  // namespace mantissa::train
