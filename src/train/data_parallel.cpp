// A rank's share of a batch, broadcasts from rank 0, the ranks' settings and weights compared; see
// mantissa/train/data_parallel.h.
#include "mantissa/train/data_parallel.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "mantissa/ops/ops.h"

namespace mantissa::train {
namespace {

void require_contiguous(const Tensor& t) {
  if (!t.is_contiguous()) throw std::logic_error("data parallel: a parameter or buffer that is not contiguous");
}

std::span<std::byte> bytes_of(const Tensor& t) {
  require_contiguous(t);
  return {static_cast<std::byte*>(t.data()), static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype())};
}

// A tensor's bytes where the host can read them: itself, or a copy from its device.
Tensor on_host(const Tensor& t) { return t.device() == Device::cpu() ? t : t.to(Device::cpu()); }

}  // namespace

Batch shard_batch(const Batch& batch, int rank, int ranks, bool even) {
  if (ranks == 1) return batch;
  const bool tokens = !batch.tokens.empty();
  const std::int64_t n = tokens ? batch.rows : batch.inputs.size(0);
  if (even && n % ranks != 0) {
    throw std::invalid_argument("data parallel: a batch of " + std::to_string(n) + " rows does not split evenly over " +
                                std::to_string(ranks) + " ranks; make the batch size a multiple of the number of ranks");
  }
  const auto total = static_cast<std::int64_t>(batch.targets.size());
  if (n == 0 || total % n != 0) throw std::logic_error("data parallel: targets are not a whole number per row");
  const std::int64_t per_row = total / n;
  const std::int64_t lo = n * rank / ranks, hi = n * (rank + 1) / ranks;
  Batch out;
  out.stream = batch.stream;
  out.stream_start = batch.stream_start;
  out.targets.assign(batch.targets.begin() + lo * per_row, batch.targets.begin() + hi * per_row);
  if (tokens) {
    out.rows = hi - lo;
    out.length = batch.length;
    out.tokens.assign(batch.tokens.begin() + lo * batch.length, batch.tokens.begin() + hi * batch.length);
  } else if (hi > lo) {
    out.inputs = contiguous_copy(slice(batch.inputs, 0, lo, hi));
  }
  return out;
}

void broadcast_from_rank0(dist::ProcessGroup& group, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    if (t.device() == Device::cpu()) {
      group.broadcast(bytes_of(t), 0);
      continue;
    }
    // On a GPU: through the host (once at the start, and batch norm's statistics each step).
    require_contiguous(t);
    const Tensor host = t.to(Device::cpu());
    const std::span<std::byte> bytes = bytes_of(host);
    group.broadcast(bytes, 0);
    copy_bytes(t.storage(), static_cast<std::size_t>(t.offset()) * dtype_size(t.dtype()), host.storage(),
               static_cast<std::size_t>(host.offset()) * dtype_size(host.dtype()), bytes.size());
  }
}

std::vector<Tensor> buffers_of(const nn::Module& module) {
  std::vector<Tensor> out;
  for (const auto& [name, b] : module.named_buffers()) out.push_back(b);
  return out;
}

std::uint32_t weights_checksum(const nn::Module& module) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto add = [&](const Tensor& t) {
    const std::span<std::byte> b = bytes_of(t);
    const std::uint64_t length = b.size();
    crc = crc32(crc, reinterpret_cast<const Bytef*>(&length), sizeof length);
    // zlib takes at most 2^32 - 1 bytes a call.
    for (std::size_t at = 0; at < b.size(); at += 1u << 30) {
      const std::size_t n = std::min<std::size_t>(b.size() - at, 1u << 30);
      crc = crc32(crc, reinterpret_cast<const Bytef*>(b.data() + at), static_cast<uInt>(n));
    }
  };
  for (const auto& [name, p] : module.named_parameters()) add(on_host(p));
  return static_cast<std::uint32_t>(crc);
}

namespace {

// Settings as text, NUL-separated (names and values hold no NUL: they come from flags and shapes).
std::string encode(const RunSettings& settings) {
  std::string out;
  for (const auto& [name, value] : settings) out.append(name).append(1, '\0').append(value).append(1, '\0');
  return out;
}

RunSettings decode(const std::string& text) {
  RunSettings out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t name_end = text.find('\0', at);
    const std::size_t value_end = name_end == std::string::npos ? name_end : text.find('\0', name_end + 1);
    if (value_end == std::string::npos) break;
    out.emplace_back(text.substr(at, name_end - at), text.substr(name_end + 1, value_end - name_end - 1));
    at = value_end + 1;
  }
  return out;
}

}  // namespace

void check_settings_agree(dist::ProcessGroup& group, const RunSettings& mine) {
  // Rank 0's settings, to every rank: the length, then the text.
  const std::string text = encode(mine);
  std::uint64_t n = text.size();
  group.broadcast(std::as_writable_bytes(std::span(&n, 1)), 0);
  std::string root = group.rank() == 0 ? text : std::string(n, '\0');
  group.broadcast(std::as_writable_bytes(std::span(root.data(), root.size())), 0);
  const RunSettings theirs = decode(root);
  // Here: the index of rank 0's first setting this rank has otherwise or lacks; rank 0's count when
  // this rank has one more; -1 when all agree.
  std::int64_t first = -1;
  for (std::size_t i = 0; i < theirs.size() && first < 0; ++i) {
    const auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& s) { return s.first == theirs[i].first; });
    if (it == mine.end() || it->second != theirs[i].second) first = static_cast<std::int64_t>(i);
  }
  if (first < 0 && mine.size() != theirs.size()) first = static_cast<std::int64_t>(theirs.size());
  std::vector<std::int64_t> all(static_cast<std::size_t>(group.size()));
  group.all_gather(std::as_bytes(std::span(&first, 1)), std::as_writable_bytes(std::span(all)));
  const auto differs = std::find_if(all.begin(), all.end(), [](std::int64_t i) { return i >= 0; });
  if (differs == all.end()) return;
  const int rank = static_cast<int>(differs - all.begin());
  const auto i = static_cast<std::size_t>(*differs);
  std::string what;
  if (i < theirs.size()) {
    const std::string& name = theirs[i].first;
    what = name + " (rank 0: " + theirs[i].second + ")";
    if (group.rank() == rank) {
      const auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& s) { return s.first == name; });
      what += " (this rank: " + (it == mine.end() ? std::string("none") : it->second) + ")";
    }
  } else {
    what = "a setting rank 0 does not have";
  }
  throw std::invalid_argument("data parallel: rank " + std::to_string(rank) + "'s settings differ from rank 0's: " + what +
                              "; every rank must run the same command on the same data");
}

void check_weights_agree(dist::ProcessGroup& group, const nn::Module& module, std::int64_t step) {
  const std::uint32_t mine = weights_checksum(module);
  std::vector<std::uint32_t> all(static_cast<std::size_t>(group.size()));
  group.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)));
  bool same = true;
  for (const std::uint32_t c : all) same = same && c == all.front();
  if (same) return;
  std::string list;
  for (std::size_t r = 0; r < all.size(); ++r) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", all[r]);
    list += (r > 0 ? ", rank " : "rank ") + std::to_string(r) + " " + hex;
  }
  throw dist::DistributedError("the ranks' weights differ after step " + std::to_string(step) + " (checksums: " + list +
                               "); they must stay identical (same options, data and build on every rank)");
}

}  // namespace mantissa::train
