// The single-process group, and the choice between it and MPI's (mpi_group.cpp, built with MPI).
#include "mantissa/dist/process_group.h"

#include <cstdlib>
#include <cstring>

namespace mantissa::dist {
namespace {

class SingleGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void all_reduce(std::span<double>, ReduceOp) override {}
  void broadcast(std::span<std::byte>, int root) override {
    if (root != 0) throw std::invalid_argument("broadcast: root " + std::to_string(root) + " of a 1-process group");
  }
  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override { copy(mine, all); }
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override { copy(send, recv); }
  void barrier() override {}
  [[noreturn]] void abort(int status) override { std::exit(status); }

 private:
  static void copy(std::span<const std::byte> from, std::span<std::byte> to) {
    if (from.size() != to.size()) throw std::invalid_argument("collective: buffers of different sizes");
    if (!from.empty()) std::memcpy(to.data(), from.data(), from.size());
  }
};

}  // namespace

#ifdef MANTISSA_WITH_MPI
std::shared_ptr<ProcessGroup> make_mpi_group();  // mpi_group.cpp
#endif

std::shared_ptr<ProcessGroup> ProcessGroup::single() { return std::make_shared<SingleGroup>(); }

bool ProcessGroup::launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

std::shared_ptr<ProcessGroup> ProcessGroup::from_environment() {
  if (!launched_by_mpi()) return single();
#ifdef MANTISSA_WITH_MPI
  return make_mpi_group();
#else
  throw DistributedError(
      "started by an MPI launcher, but this mantissa was built without MPI (install libopenmpi-dev and rebuild; "
      "`mantissa info` says what was built)");
#endif
}

#ifndef MANTISSA_WITH_MPI
bool ProcessGroup::mpi_built() { return false; }
std::string ProcessGroup::mpi_version() { return "none"; }
#endif

}  // namespace mantissa::dist
