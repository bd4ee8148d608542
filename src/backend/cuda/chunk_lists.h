// Many tensors to one launch, as Apex's multi_tensor_apply: each block of a launch takes one chunk of
// elements of one tensor, and a launch holds at most so many tensors and blocks, because its list travels as a kernel parameter (which has a size limit). A tensor that does
// not fit goes on in the next launch. Host code, so the plan is tested on every machine
// (tests/unit/chunk_lists_test.cpp: every element of every tensor in exactly one block); the loss
// scaler's pass and the optimizer updates (cuda_elementwise.cu, cuda_optim.cu) launch by it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace mantissa::detail::cuda {

// A list kernel's limits: elements a block takes, tensors and blocks a launch holds.
struct ChunkLimits {
  std::int64_t chunk;
  std::size_t tensors, blocks;
};
inline constexpr ChunkLimits kScaleCheckLists{32768, 48, 512};  // the loss scaler's pass (cuda_elementwise.cu)
inline constexpr ChunkLimits kUpdateLists{65536, 32, 256};      // the optimizer updates (cuda_optim.cu)

struct ChunkBlock {
  int slot;            // the tensor's place in its launch's members
  std::int64_t chunk;  // which chunk of it: elements [chunk * chunk_size, ...)
};
struct ChunkLaunch {
  std::vector<std::size_t> members;  // by slot: indices into the counts given
  std::vector<ChunkBlock> blocks;
};

// The launches covering tensors of counts[i] elements (empty ones get none), in order.
inline std::vector<ChunkLaunch> plan_chunk_launches(std::span<const std::int64_t> counts, const ChunkLimits& limits) {
  const std::int64_t chunk = limits.chunk;
  const std::size_t max_tensors = limits.tensors, max_blocks = limits.blocks;
  if (chunk <= 0 || max_tensors == 0 || max_blocks == 0) throw std::invalid_argument("plan_chunk_launches: empty limits");
  std::vector<ChunkLaunch> launches(1);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const std::int64_t chunks = (counts[i] + chunk - 1) / chunk;
    for (std::int64_t c = 0; c < chunks; ++c) {
      ChunkLaunch* l = &launches.back();
      const bool member = !l->members.empty() && l->members.back() == i;
      if (l->blocks.size() == max_blocks || (!member && l->members.size() == max_tensors)) {
        l = &launches.emplace_back();
      }
      if (l->members.empty() || l->members.back() != i) l->members.push_back(i);
      l->blocks.push_back({static_cast<int>(l->members.size() - 1), c});
    }
  }
  if (launches.back().blocks.empty()) launches.pop_back();
  return launches;
}

}  // namespace mantissa::detail::cuda
