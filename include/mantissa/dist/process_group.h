// The processes of a data-parallel run and the few collectives training needs between them (all-reduce,
// broadcast, all-gather, all-to-all, barrier), behind one small interface: Open MPI for CPU ranks
// (`mpirun -np N mantissa train ...`), a single process otherwise. A build without MPI is complete: it
// runs one process, and from_environment() says why when it was launched by mpirun.
//
//   const auto group = dist::ProcessGroup::from_environment();   // MPI under mpirun, else one process
//   std::array<double, 2> v{loss, items};
//   group->all_reduce(v, dist::ReduceOp::sum);
//
// Every collective is called by every rank in the same order. A rank that waits longer than the group's
// timeout for the others (one died or hangs) stops the whole job with one line naming the collective,
// instead of hanging.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "mantissa/base/errors.h"

namespace mantissa::dist {

enum class ReduceOp { sum, max, min };

// A collective failed or timed out.
class DistributedError : public Error {
 public:
  using Error::Error;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single" or "mpi".
  virtual std::string backend() const = 0;

  // Element-wise reduction across ranks, in place; every rank gets the same values.
  virtual void all_reduce(std::span<double> values, ReduceOp op) = 0;
  // Root's bytes copied into every rank's.
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  // Every rank's `mine` (the same size everywhere), in rank order, into `all` (size() times as long).
  virtual void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) = 0;
  // `send` is size() equal blocks; block j goes to rank j, and rank j's block for this rank lands in block
  // j of `recv` (a reduce-scatter's first half, with the sum left to the caller).
  virtual void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job now with this exit status (after one of them failed: the others must not
  // wait for it). A single process just exits.
  [[noreturn]] virtual void abort(int status) = 0;

  // Marks a wait for the other ranks that is not one of the group's own collectives (a GPU collective
  // queued through NCCL): the group's watchdog stops the job when it lasts past the timeout, as it does
  // for its own. Pairs of calls may nest (the oldest wait counts); WaitScope makes the pair.
  virtual void begin_wait(const char* what) { (void)what; }
  virtual void end_wait() {}

  // Payload bytes this process has sent to other ranks so far (what leaves it, by the collectives'
  // arithmetic: an all-gather sends its block to size()-1 ranks, an all-to-all size()-1 of its blocks).
  std::int64_t bytes_sent() const { return bytes_sent_; }
  // Seconds a collective may wait for the other ranks before the job is stopped (0: forever).
  void set_timeout(double seconds) { timeout_seconds_ = seconds; }
  double timeout() const { return timeout_seconds_; }

  // One process (rank 0 of 1): every collective copies or does nothing.
  static std::shared_ptr<ProcessGroup> single();
  // MPI's world when this process was started by mpirun (or another MPI launcher), else single(). Under a
  // launcher in a build without MPI it throws DistributedError, rather than run N copies of one job.
  static std::shared_ptr<ProcessGroup> from_environment();
  // Whether this build has MPI, and which ("Open MPI v4.1.4", or "none").
  static bool mpi_built();
  static std::string mpi_version();
  // Whether an MPI launcher started this process (its environment variables are set).
  static bool launched_by_mpi();

 protected:
  std::atomic<std::int64_t> bytes_sent_ = 0;  // the gradient thread and the training thread both send
  std::atomic<double> timeout_seconds_ = 300;
};

// begin_wait() now, end_wait() at the end of the scope.
class WaitScope {
 public:
  WaitScope(ProcessGroup& group, const char* what) : group_(group) { group_.begin_wait(what); }
  ~WaitScope() { group_.end_wait(); }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  ProcessGroup& group_;
};

}  // namespace mantissa::dist
