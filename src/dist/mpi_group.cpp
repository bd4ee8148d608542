// The MPI process group: MPI's world communicator, nonblocking collectives waited for without spinning,
// errors returned (not fatal) and turned into DistributedError naming the collective, and a watchdog
// thread that stops the whole job when a collective waits longer than the timeout (a rank died or hangs)
// instead of letting it hang.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <cstdio>
#include <mutex>
#include <thread>

#include "mantissa/dist/process_group.h"

namespace mantissa::dist {
namespace {

using Clock = std::chrono::steady_clock;

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup() {
    int provided = 0;
    int argc = 0;
    char** argv = nullptr;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      throw DistributedError("MPI_Init_thread failed");
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Finalize();
      throw DistributedError("this MPI does not support MPI_THREAD_MULTIPLE (the gradient thread needs it)");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiGroup() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    MPI_Finalize();
  }
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(std::span<double> values, ReduceOp op) override {
    const MPI_Op mop = op == ReduceOp::sum ? MPI_SUM : op == ReduceOp::max ? MPI_MAX : MPI_MIN;
    const WaitScope w(*this, "all-reduce");
    MPI_Request req;
    check(MPI_Iallreduce(MPI_IN_PLACE, values.data(), count(values.size()), MPI_DOUBLE, mop, MPI_COMM_WORLD, &req),
          "all-reduce");
    complete(req, "all-reduce");
    bytes_sent_ += static_cast<std::int64_t>(values.size_bytes()) * 2 * (size_ - 1) / size_;
  }
  void broadcast(std::span<std::byte> bytes, int root) override {
    const WaitScope w(*this, "broadcast");
    MPI_Request req;
    check(MPI_Ibcast(bytes.data(), count(bytes.size()), MPI_BYTE, root, MPI_COMM_WORLD, &req), "broadcast");
    complete(req, "broadcast");
    if (rank_ == root) bytes_sent_ += static_cast<std::int64_t>(bytes.size()) * (size_ - 1);
  }
  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    if (all.size() != mine.size() * static_cast<std::size_t>(size_)) {
      throw std::invalid_argument("all-gather: the output is not size() times the input");
    }
    const WaitScope w(*this, "all-gather");
    MPI_Request req;
    check(MPI_Iallgather(mine.data(), count(mine.size()), MPI_BYTE, all.data(), count(mine.size()), MPI_BYTE,
                         MPI_COMM_WORLD, &req),
          "all-gather");
    complete(req, "all-gather");
    bytes_sent_ += static_cast<std::int64_t>(mine.size()) * (size_ - 1);
  }
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (send.size() != recv.size() || send.size() % static_cast<std::size_t>(size_) != 0) {
      throw std::invalid_argument("all-to-all: buffers not size() equal blocks");
    }
    const std::size_t block = send.size() / static_cast<std::size_t>(size_);
    const WaitScope w(*this, "all-to-all");
    MPI_Request req;
    check(MPI_Ialltoall(send.data(), count(block), MPI_BYTE, recv.data(), count(block), MPI_BYTE, MPI_COMM_WORLD, &req),
          "all-to-all");
    complete(req, "all-to-all");
    bytes_sent_ += static_cast<std::int64_t>(block) * (size_ - 1);
  }
  void barrier() override {
    const WaitScope w(*this, "barrier");
    MPI_Request req;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "barrier");
    complete(req, "barrier");
  }
  // A collective in progress, for the watchdog (the gradient thread and the training thread may each
  // have one; the oldest counts).
  void begin_wait(const char* what) override {
    std::lock_guard lock(mutex_);
    if (waiting_++ == 0) {
      since_ = Clock::now();
      what_ = what;
    }
  }
  void end_wait() override {
    std::lock_guard lock(mutex_);
    --waiting_;
  }
  [[noreturn]] void abort(int status) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);  // MPI_Abort does not return; if it did, still end
  }

 private:
  static int count(std::size_t n) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw std::invalid_argument("collective: more than 2^31 elements in one call");
    }
    return static_cast<int>(n);
  }

  // Waits for a nonblocking collective without spinning on a core: MPI's blocking calls poll without
  // pause, which on the gradient thread would take the core from the backward pass it overlaps (mpirun
  // binds a rank's threads to one core). Polls briefly, then sleeps between polls.
  void complete(MPI_Request& req, const char* what) const {
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
      if (done != 0) return;
      if (polls >= 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw DistributedError(std::string(what) + " failed on rank " + std::to_string(rank_) + ": " +
                           std::string(text, static_cast<std::size_t>(len)));
  }

  void watch() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(250));
      if (stop_ || waiting_ == 0 || timeout_seconds_ <= 0) continue;
      const double waited = std::chrono::duration<double>(Clock::now() - since_).count();
      if (waited < timeout_seconds_) continue;
      std::fprintf(stderr,
                   "mantissa: rank %d: %s waited %.0f s for the other ranks (one of them died or hangs); stopping "
                   "all %d ranks\n",
                   rank_, what_, waited, size_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 4);
    }
  }

  int rank_ = 0, size_ = 1;
  std::thread watchdog_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  int waiting_ = 0;
  Clock::time_point since_;
  const char* what_ = "";
};

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_group() {
  // MPI starts once per process and cannot start again after it ends: one group, kept to the end.
  static std::mutex mutex;
  static std::shared_ptr<ProcessGroup> group;
  std::lock_guard lock(mutex);
  if (!group) group = std::make_shared<MpiGroup>();
  return group;
}

bool ProcessGroup::mpi_built() { return true; }

std::string ProcessGroup::mpi_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<std::size_t>(len));
  const std::size_t comma = s.find(',');
  return comma == std::string::npos ? s : s.substr(0, comma);
}

}  // namespace mantissa::dist
