// Small device values read together, once a step (mantissa/core/batched_reads.h).
#include "mantissa/core/batched_reads.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "element_io.h"

namespace mantissa {
namespace {

thread_local BatchedReads* t_active = nullptr;

constexpr std::size_t kAlign = 16;

}  // namespace

Tensor BatchedReads::slot(std::size_t bytes, Use use) {
  const std::size_t size = std::max<std::size_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
  if (blocks_.empty() || used_ + size > static_cast<std::size_t>(blocks_.back().numel())) {
    // Zeroed where it lives (no copy, no wait).
    blocks_.push_back(Tensor::zeros({static_cast<std::int64_t>(std::max(size, kBlockBytes))}, DType::e4m3, device_));
    used_ = 0;
  }
  const Tensor& block = blocks_.back();
  pending_.push_back({blocks_.size() - 1, used_, bytes, std::move(use)});
  Tensor view = make_view(block, {static_cast<std::int64_t>(bytes)}, {1}, static_cast<std::int64_t>(used_));
  used_ += size;
  return view;
}

void BatchedReads::value(const Tensor& t, std::function<void(double)> use) {
  if (!t.defined() || t.numel() != 1) throw std::invalid_argument("BatchedReads::value: a one-element tensor, not " + (t.defined() ? shape_str(t.shape()) : std::string("an undefined one")));
  if (!(t.device() == device_)) {
    throw std::invalid_argument("BatchedReads::value: a tensor on " + t.device().str() + " for reads from " + device_.str());
  }
  const DType dtype = t.dtype();
  const std::size_t size = dtype_size(dtype);
  const Tensor s = slot(size, [dtype, use = std::move(use)](std::span<const std::byte> bytes) {
    use(detail::load_element(dtype, bytes.data(), 0));
  });
  copy_bytes(s.storage(), static_cast<std::size_t>(s.offset()), t.storage(), static_cast<std::size_t>(t.offset()) * size, size);
}

void BatchedReads::read() {
  std::vector<Tensor> blocks = std::exchange(blocks_, {});
  std::vector<Pending> pending = std::exchange(pending_, {});
  const std::size_t last_used = std::exchange(used_, 0);
  // Each block copied as far as its slots reach: one copy (one wait on a GPU) each.
  std::vector<Tensor> host(blocks.size());
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t bytes = b + 1 == blocks.size() ? last_used : static_cast<std::size_t>(blocks[b].numel());
    host[b] = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::e4m3);
    copy_bytes(host[b].storage(), 0, blocks[b].storage(), static_cast<std::size_t>(blocks[b].offset()), bytes);
  }
  for (const Pending& p : pending) {
    p.use(std::span(static_cast<const std::byte*>(host[p.block].data()) + p.offset, p.bytes));
  }
}

BatchedReads* active_batched_reads() { return t_active; }

ActiveBatchedReads::ActiveBatchedReads(BatchedReads& reads) : previous_(std::exchange(t_active, &reads)) {}
ActiveBatchedReads::~ActiveBatchedReads() { t_active = previous_; }

}  // namespace mantissa
