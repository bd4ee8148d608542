// Where the trainer's batches come from: a data source hands out training batches in a reproducible
// order, the evaluation batches, and its position as text, which a checkpoint keeps so that a resumed
// run sees the very batches an uninterrupted one would.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>

#include "mantissa/data/datasets.h"
#include "mantissa/train/model.h"

namespace mantissa::train {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // The next training batch.
  virtual Batch next() = 0;
  // Calls `each` with every evaluation batch: all of the held-out data when `full`, else a quick subset;
  // the same batches every time.
  virtual void for_each_eval_batch(bool full, const std::function<void(const Batch&)>& each) = 0;
  // What throughput counts: "images" or "tokens".
  virtual std::string item_unit() const = 0;
  // Whether evaluation reports accuracy (classification) besides the loss.
  virtual bool reports_accuracy() const { return true; }
  // The position in the training data, as checkpoint metadata, and its restore (throws
  // std::invalid_argument for a position this source cannot have).
  virtual std::map<std::string, std::string> position() const = 0;
  virtual void seek(const std::map<std::string, std::string>& position) = 0;
  // What the data is, for data-parallel ranks to agree on before they train: its sizes and a CRC-32 of
  // its contents ("60000 + 10000 examples, crc32 1a2b3c4d").
  virtual std::string identity() const = 0;
  // Text: the entropy of the training text's bytes in nats, the loss of a model that predicts each byte
  // by its frequency alone (the unigram plateau a character model passes through); else none.
  virtual std::optional<double> byte_entropy() const { return std::nullopt; }
};

// The entropy of the bytes of `text` (their frequencies), in nats; 0 for no text.
double byte_entropy_of(std::span<const std::uint8_t> text);

// Labelled examples held in memory (images [N, C, H, W], or any [N, ...] tensor): training batches in an
// order reshuffled every epoch from the seed (or in order, without shuffling); evaluation over the test
// set in batches of 500, the first 2000 examples when not `full`.
class ClassificationData final : public DataSource {
 public:
  ClassificationData(ImageDataset train, ImageDataset test, std::int64_t batch_size, std::uint64_t seed,
                     bool shuffle = true);
  Batch next() override;
  void for_each_eval_batch(bool full, const std::function<void(const Batch&)>& each) override;
  std::string item_unit() const override { return "images"; }
  std::map<std::string, std::string> position() const override;
  void seek(const std::map<std::string, std::string>& position) override;
  std::string identity() const override;
  const ImageDataset& train_set() const { return train_; }

 private:
  ImageDataset train_, test_;
  BatchOrder order_;
};

// Per-pixel targets from labelled images, for segmentation: a pixel whose (normalized) value exceeds
// `threshold` belongs to the image's object, class label + 1; any other is background, class 0. Batches,
// order and evaluation are the wrapped ClassificationData's; accuracy is per pixel.
class SegmentationData final : public DataSource {
 public:
  SegmentationData(ImageDataset train, ImageDataset test, std::int64_t batch_size, std::uint64_t seed, double threshold);
  Batch next() override;
  void for_each_eval_batch(bool full, const std::function<void(const Batch&)>& each) override;
  std::string item_unit() const override { return "images"; }
  std::map<std::string, std::string> position() const override { return images_.position(); }
  void seek(const std::map<std::string, std::string>& position) override { images_.seek(position); }
  std::string identity() const override;

 private:
  Batch per_pixel(Batch b) const;
  ClassificationData images_;
  double threshold_;
};

// Byte-level text: windows of `block` tokens at offsets drawn from a generator seeded by `seed` (its
// state is the position); evaluation over `eval_batches` fixed windows of the validation text.
class TextData final : public DataSource {
 public:
  // Throws DataError when a split is shorter than one window (block + 1 bytes).
  TextData(TextCorpus corpus, std::int64_t batch_size, std::int64_t block, std::uint64_t seed,
           std::int64_t eval_batches, const std::string& name);
  Batch next() override;
  void for_each_eval_batch(bool full, const std::function<void(const Batch&)>& each) override;
  std::string item_unit() const override { return "tokens"; }
  bool reports_accuracy() const override { return false; }
  std::map<std::string, std::string> position() const override;
  void seek(const std::map<std::string, std::string>& position) override;
  std::string identity() const override;
  std::optional<double> byte_entropy() const override { return entropy_; }

 private:
  Batch window_batch(std::span<const std::uint8_t> text, std::mt19937_64& rng) const;
  TextCorpus corpus_;
  double entropy_;
  std::int64_t batch_, block_, eval_batches_;
  std::uint64_t seed_;
  std::mt19937_64 rng_;
};

// Byte-level text as `batch` parallel streams (each split cut into `batch` equal pieces, PyTorch's
// word_language_model's batchify), read in consecutive segments of `bptt` tokens, so that a recurrent
// model carries its state from one segment to the next (Batch::stream); after the last segment the
// training streams start again. Evaluation: the first `eval_batches` segments of the validation streams.
class TextStreams final : public DataSource {
 public:
  // Throws DataError when a split's streams are shorter than one segment (bptt + 1 bytes).
  TextStreams(TextCorpus corpus, std::int64_t batch_size, std::int64_t bptt, std::int64_t eval_batches,
              const std::string& name);
  Batch next() override;
  void for_each_eval_batch(bool full, const std::function<void(const Batch&)>& each) override;
  std::string item_unit() const override { return "tokens"; }
  bool reports_accuracy() const override { return false; }
  std::map<std::string, std::string> position() const override;
  void seek(const std::map<std::string, std::string>& position) override;
  std::string identity() const override;
  std::optional<double> byte_entropy() const override { return entropy_; }

 private:
  // Segment k of the streams over `text`.
  Batch segment(std::span<const std::uint8_t> text, std::int64_t k, int stream) const;
  std::int64_t segments(std::span<const std::uint8_t> text) const;
  TextCorpus corpus_;
  double entropy_;
  std::int64_t batch_, bptt_, eval_batches_;
  std::int64_t next_ = 0;  // the next training segment
};

}  // namespace mantissa::train
