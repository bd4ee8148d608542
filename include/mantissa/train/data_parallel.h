// The pieces of data-parallel training that are not the gradient reduction: a rank's share of a batch,
// tensors copied from rank 0, and the weights' checksum the ranks compare. Used by the Trainer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/dist/process_group.h"
#include "mantissa/nn/module.h"
#include "mantissa/train/model.h"

namespace mantissa::train {

// Rank `rank` of `ranks`' rows of a batch (images, token sequences or streams, with their targets): rows
// [n*rank/ranks, n*(rank+1)/ranks). even: the rows must split evenly (training, where every rank's mean
// weighs the same), else throws std::invalid_argument saying so.
Batch shard_batch(const Batch& batch, int rank, int ranks, bool even);

// The tensors' bytes on every rank replaced by rank 0's.
void broadcast_from_rank0(dist::ProcessGroup& group, const std::vector<Tensor>& tensors);

// The module's buffers (batch norm's running statistics), in order.
std::vector<Tensor> buffers_of(const nn::Module& module);

// A checksum (CRC-32 of every parameter's bytes, in order, with each one's length). Buffers are left out:
// batch norm's running statistics follow each rank's own rows until the next broadcast from rank 0.
std::uint32_t weights_checksum(const nn::Module& module);

// A run's settings as (name, value), in the order they are reported.
using RunSettings = std::vector<std::pair<std::string, std::string>>;

// Every rank's settings must be rank 0's: rank 0 sends its own, each rank compares, and the ranks share
// where the first difference lies. If any rank differs, every rank throws std::invalid_argument naming
// the lowest such rank and the first setting (in rank 0's order) it has otherwise, with rank 0's value
// (and its own, on that rank). Run before anything else is exchanged: parameters of other shapes would
// not fit a broadcast.
void check_settings_agree(dist::ProcessGroup& group, const RunSettings& mine);

// Throws dist::DistributedError naming the step and every rank's checksum if the ranks' weights differ.
void check_weights_agree(dist::ProcessGroup& group, const nn::Module& module, std::int64_t step);

}  // namespace mantissa::train
