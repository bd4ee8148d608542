// A step's optimizer update is one backend call over every parameter (a GPU launches a few kernels for
// the lot, not one per parameter), with master copies written back in the same pass: the list gives
// each parameter the bits its own update would, the write-back the bits RoundInto gives, and the GPU's
// plan of chunks per launch (cuda/chunk_lists.h) covers every element once within its limits.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../../src/backend/cuda/chunk_lists.h"
#include "../common/test_seed.h"
#include "../../src/backend/registry.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"
#include "mantissa/optim/optimizer.h"

namespace mantissa {
namespace {

using detail::cuda::ChunkLaunch;
using detail::cuda::ChunkLimits;
using detail::cuda::plan_chunk_launches;

// Every element of every tensor in exactly one block, no launch past its limits, tensors in order.
void expect_covers(std::span<const std::int64_t> counts, const ChunkLimits& limits) {
  const std::vector<ChunkLaunch> launches = plan_chunk_launches(counts, limits);
  std::map<std::size_t, std::vector<int>> chunks_seen;  // tensor -> how often each chunk was given
  std::size_t last = 0;
  for (const ChunkLaunch& l : launches) {
    ASSERT_FALSE(l.blocks.empty());
    ASSERT_LE(l.members.size(), limits.tensors);
    ASSERT_LE(l.blocks.size(), limits.blocks);
    for (std::size_t s = 0; s < l.members.size(); ++s) {
      ASSERT_GT(counts[l.members[s]], 0) << "an empty tensor got a slot";
      ASSERT_GE(l.members[s], last) << "tensors out of order";
      last = l.members[s];
      if (s > 0) {
        ASSERT_GT(l.members[s], l.members[s - 1]) << "a tensor twice in one launch";
      }
    }
    for (const detail::cuda::ChunkBlock& b : l.blocks) {
      ASSERT_GE(b.slot, 0);
      ASSERT_LT(static_cast<std::size_t>(b.slot), l.members.size());
      const std::size_t t = l.members[static_cast<std::size_t>(b.slot)];
      const std::int64_t chunks = (counts[t] + limits.chunk - 1) / limits.chunk;
      ASSERT_GE(b.chunk, 0);
      ASSERT_LT(b.chunk, chunks);
      auto& seen = chunks_seen[t];
      seen.resize(static_cast<std::size_t>(chunks));
      ++seen[static_cast<std::size_t>(b.chunk)];
    }
  }
  for (std::size_t t = 0; t < counts.size(); ++t) {
    const std::int64_t chunks = (counts[t] + limits.chunk - 1) / limits.chunk;
    if (chunks == 0) {
      EXPECT_EQ(chunks_seen.count(t), 0U);
      continue;
    }
    ASSERT_EQ(chunks_seen[t].size(), static_cast<std::size_t>(chunks)) << "tensor " << t;
    for (std::size_t c = 0; c < chunks_seen[t].size(); ++c) ASSERT_EQ(chunks_seen[t][c], 1) << "tensor " << t << " chunk " << c;
  }
}

TEST(ChunkLists, EveryElementOfEveryTensorIsInExactlyOneBlock) {
  // Edge cases: nothing, empties, exact multiples, a tensor longer than a whole launch.
  const ChunkLimits small{4, 3, 5};
  for (const std::vector<std::int64_t>& counts :
       std::vector<std::vector<std::int64_t>>{{}, {0}, {0, 0, 1}, {4}, {5}, {20}, {21}, {100, 1, 0, 3}, {1, 1, 1, 1, 1, 1, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(counts));
    expect_covers(counts, small);
  }
  std::mt19937_64 rng(testing::test_seed());
  for (int trial = 0; trial < 300; ++trial) {
    const ChunkLimits limits{static_cast<std::int64_t>(1 + rng() % 9), 1 + rng() % 6, 1 + rng() % 12};
    std::vector<std::int64_t> counts(rng() % 40);
    for (std::int64_t& c : counts) c = rng() % 4 == 0 ? 0 : static_cast<std::int64_t>(rng() % 120);
    SCOPED_TRACE(::testing::PrintToString(counts));
    expect_covers(counts, limits);
  }
  EXPECT_THROW(plan_chunk_launches(std::vector<std::int64_t>{1}, ChunkLimits{0, 1, 1}), std::invalid_argument);
}

// GPT-2 124M's 148 parameters: the optimizer's update is a handful of launches where it was 148, and
// the loss scaler's pass about as many.
TEST(ChunkLists, Gpt2sParametersAreAFewLaunches) {
  std::vector<std::int64_t> counts{50304 * 768, 1024 * 768};
  for (int layer = 0; layer < 12; ++layer) {
    for (const std::int64_t n : {768, 768, 2304 * 768, 2304, 768 * 768, 768, 768, 768, 3072 * 768, 3072, 768 * 3072, 768}) {
      counts.push_back(n);
    }
  }
  counts.push_back(768);
  counts.push_back(768);
  ASSERT_EQ(counts.size(), 148U);
  expect_covers(counts, detail::cuda::kUpdateLists);
  expect_covers(counts, detail::cuda::kScaleCheckLists);
  const std::size_t update = plan_chunk_launches(counts, detail::cuda::kUpdateLists).size();
  const std::size_t check = plan_chunk_launches(counts, detail::cuda::kScaleCheckLists).size();
  EXPECT_LE(update, 10U);
  EXPECT_LE(check, 10U);
  std::printf("GPT-2 124M: the optimizer update in %zu launches, the loss scaler's pass in %zu\n", update, check);
}

// The CPU's update kernels, spied on: how often each is called, and with how many parameters.
template <class K>
typename K::Fn*& cpu_slot() {
  return detail::KernelTable<K>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
}
std::vector<std::size_t> g_list_sizes;
int g_round_into_calls = 0;
detail::kernel::AdamUpdate::Fn* g_adam = nullptr;
detail::kernel::SgdUpdate::Fn* g_sgd = nullptr;
detail::kernel::RoundInto::Fn* g_round_into = nullptr;

class UpdateSpies {
 public:
  UpdateSpies() {
    detail::impl_for(Device::cpu());  // registers the kernels
    g_adam = std::exchange(cpu_slot<detail::kernel::AdamUpdate>(),
                           [](std::span<const detail::ParamUpdate> l, const detail::AdamStep& s, const detail::WriteBack& w) {
                             g_list_sizes.push_back(l.size());
                             g_adam(l, s, w);
                           });
    g_sgd = std::exchange(cpu_slot<detail::kernel::SgdUpdate>(),
                          [](std::span<const detail::ParamUpdate> l, const detail::SgdStep& s, const detail::WriteBack& w) {
                            g_list_sizes.push_back(l.size());
                            g_sgd(l, s, w);
                          });
    g_round_into = std::exchange(cpu_slot<detail::kernel::RoundInto>(),
                                 [](const Tensor& src, const Tensor& dst, Rounding r, std::uint64_t seed) {
                                   ++g_round_into_calls;
                                   g_round_into(src, dst, r, seed);
                                 });
    g_list_sizes.clear();
    g_round_into_calls = 0;
  }
  ~UpdateSpies() {
    cpu_slot<detail::kernel::AdamUpdate>() = g_adam;
    cpu_slot<detail::kernel::SgdUpdate>() = g_sgd;
    cpu_slot<detail::kernel::RoundInto>() = g_round_into;
  }
  UpdateSpies(const UpdateSpies&) = delete;
  UpdateSpies& operator=(const UpdateSpies&) = delete;
};

// Sizes around the CPU's block of 2048 values, so blocks of several parameters share the threads.
const std::vector<std::int64_t> kSizes{1, 7, 2047, 2048, 2049, 5000, 70001};

std::vector<Tensor> make_params(DType dtype, std::uint64_t seed) {
  std::vector<Tensor> ps;
  for (std::size_t i = 0; i < kSizes.size(); ++i) {
    ps.push_back(cast(Tensor::uniform({kSizes[i]}, DType::f32, seed + i, -1, 1), dtype).set_requires_grad());
  }
  return ps;
}

void set_grads(const std::vector<Tensor>& ps, int step, std::size_t skip) {
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (i == skip) continue;  // a parameter without a gradient is left alone
    ps[i].set_grad(Tensor::uniform(ps[i].shape(), ps[i].dtype(), 1000 + 17 * static_cast<std::uint64_t>(step) + i, -1, 1));
  }
}

std::vector<std::uint8_t> bits_of(const Tensor& t) {
  const Tensor c = contiguous_copy(t);
  const auto* b = static_cast<const std::uint8_t*>(c.data());
  return {b, b + c.numel() * static_cast<std::int64_t>(dtype_size(c.dtype()))};
}

TEST(Optimizers, AStepIsOneBackendCallForEveryParameterAndWritesBackInIt) {
  UpdateSpies spies;
  const std::vector<Tensor> ps = make_params(DType::bf16, 1);
  Adam adam(ps, {.lr = 0.01, .weight_decay = 0.05}, true);
  Sgd sgd(ps, {.lr = 0.01, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    set_grads(ps, step, 2);
    adam.step();
    sgd.step();
  }
  EXPECT_EQ(g_list_sizes, std::vector<std::size_t>(6, ps.size() - 1));
  EXPECT_EQ(g_round_into_calls, 0) << "master copies are written back inside the update, not by a pass of their own";
}

// For each backend of the CPU and each optimizer: one optimizer over every parameter gives each the bits
// an optimizer of its own gives it (the list's blocks are numbered across parameters and shared by the
// threads), and every low-precision parameter holds RoundInto's bits of its master (stochastic: the
// same draws by element index).
TEST(Optimizers, AListUpdateGivesEachParameterItsOwnUpdatesBits) {
  for (CpuBackend backend : {CpuBackend::reference, CpuBackend::onednn}) {
    CpuBackendScope scope(backend);
    for (const bool adam : {false, true}) {
      SCOPED_TRACE(std::string(adam ? "adamw " : "sgd ") + (backend == CpuBackend::reference ? "reference" : "cpu"));
      const MasterWeightOptions master{.writeback = Rounding::stochastic, .seed = 9};
      const auto make = [&](std::vector<Tensor> ps) -> std::unique_ptr<Optimizer> {
        if (adam) return std::make_unique<Adam>(std::move(ps), AdamOptions{.lr = 0.01, .weight_decay = 0.05, .state_dtype = DType::bf16, .master = master}, true);
        return std::make_unique<Sgd>(std::move(ps), SgdOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true, .master = master});
      };
      const std::vector<Tensor> together = make_params(DType::bf16, 1), alone = make_params(DType::bf16, 1);
      const std::unique_ptr<Optimizer> one = make(together);
      std::vector<std::unique_ptr<Optimizer>> each;
      for (const Tensor& p : alone) each.push_back(make({p}));
      for (int step = 0; step < 3; ++step) {
        set_grads(together, step, together.size());
        set_grads(alone, step, alone.size());
        one->step(step == 2 ? 0.5 : 1.0);
        for (const std::unique_ptr<Optimizer>& o : each) o->step(step == 2 ? 0.5 : 1.0);
      }
      for (std::size_t i = 0; i < together.size(); ++i) {
        SCOPED_TRACE("parameter " + std::to_string(i));
        EXPECT_EQ(bits_of(together[i]), bits_of(alone[i]));
        EXPECT_EQ(bits_of(one->master_weight(i)), bits_of(each[i]->master_weight(0)));
        // The write-back as its definition: the master rounded stochastically with (seed + step).
        const Tensor expected = Tensor::empty(together[i].shape(), DType::bf16);
        detail::run_kernel<detail::kernel::RoundInto>(Device::cpu(), one->master_weight(i), expected, Rounding::stochastic,
                                                      master.seed + static_cast<std::uint64_t>(one->steps()));
        EXPECT_EQ(bits_of(together[i]), bits_of(expected));
      }
    }
  }
}

}  // namespace
}  // namespace mantissa
