// `mpirun -np 2 mantissa train` as a user runs it: the same result as one process, one report (rank 0's),
// a batch that does not split refused in one line, a rank killed with SIGKILL or stopped that ends the
// job within a bounded time with a message naming it (and the last checkpoint intact), and two ranks in
// two network namespaces, so that the gradients really cross an interface.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_support.h"

namespace {

using Clock = std::chrono::steady_clock;

// Open MPI refuses to run as root unless told twice (CI runs as root); one thread a rank.
const bool kEnvironment = [] {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  return true;
}();

const std::string kMlpFlags = "train --model mlp --hidden 64 --steps 40 --eval-every 40 --seed 3 --threads 1 --json";
const std::string kMlp = kMlpFlags + " --batch-size 64";

std::string mpirun(int ranks, const std::string& extra = "") {
  return std::string(MANTISSA_MPIEXEC) + " -np " + std::to_string(ranks) + " " + extra + " " + MANTISSA_CLI + " ";
}

// Runs a shell command line; exit status and output.
Result shell(const std::string& line) {
  const auto dir = std::filesystem::temp_directory_path() / ("mantissa_dist_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const int raw = std::system((line + " >" + (dir / "out").string() + " 2>" + (dir / "err").string()).c_str());
  Result r{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(dir / "out"), slurp(dir / "err")};
  std::filesystem::remove_all(dir);
  return r;
}

double final_val_loss(const std::string& out) {
  const auto last_line = out.rfind('\n', out.size() - 2);
  return nlohmann::json::parse(out.substr(last_line == std::string::npos ? 0 : last_line + 1)).at("final_val_loss").get<double>();
}

// A command started in the background (its own process group), with its output in files.
class Background {
 public:
  Background(const std::string& line, const std::filesystem::path& dir) : out_(dir / "out"), err_(dir / "err") {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      execl("/bin/sh", "sh", "-c", (line + " >" + out_.string() + " 2>" + err_.string()).c_str(), nullptr);
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !done_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The exit status, or -1 if it did not end within `seconds`.
  int wait(double seconds) {
    const auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        done_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  std::string err() const { return slurp(err_); }

 private:
  std::filesystem::path out_, err_;
  pid_t pid_ = -1;
  bool done_ = false;
};

// The process of `rank` among those whose command line holds `tag` (its environment names its rank).
pid_t rank_process(const std::string& tag, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(tag) == std::string::npos || cmdline.find(MANTISSA_CLI) != 0) continue;
    std::string env = slurp(entry.path() / "environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (env.find("\nOMPI_COMM_WORLD_RANK=" + std::to_string(rank) + "\n") != std::string::npos) return std::stoi(name);
  }
  return -1;
}

TEST(DataParallelCommand, TwoRanksGiveOneProcesssResultAndOneReport) {
  const Result one = run(kMlp);
  const Result two = shell(mpirun(2) + kMlp);
  ASSERT_EQ(one.status, 0) << one.err;
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_EQ(lines(two.out), 1) << "rank 0 alone prints: " << two.out;
  EXPECT_NEAR(final_val_loss(two.out), final_val_loss(one.out), 1e-4 * final_val_loss(one.out));
  // bf16 on the wire: the same run within bf16's rounding.
  const Result bf16 = shell(mpirun(2) + kMlp + " --grad-reduce bf16");
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  EXPECT_NEAR(final_val_loss(bf16.out), final_val_loss(one.out), 0.01 * final_val_loss(one.out));
}

// compare under mpirun: one table and one set of progress lines (rank 0's), not one a rank.
TEST(DataParallelCommand, CompareReportsOnceUnderTwoRanks) {
  const Result two = shell(mpirun(2) + "compare --model mlp --hidden 64 --steps 10 --eval-every 10 --seed 3 --threads 1 "
                                       "--batch-size 64 --precisions fp32,bf16 --no-plot");
  ASSERT_EQ(two.status, 0) << two.err;
  const auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(two.err, "== fp32"), 1U) << two.err;
  EXPECT_EQ(count(two.err, "== bf16"), 1U) << two.err;
  EXPECT_EQ(count(two.out, "precision"), 1U) << two.out;
}

// On GPUs (NCCL, one GPU a rank: the machine's rank i takes GPU i): two ranks follow one process on one
// GPU. Where there are not two GPUs with NCCL, the run is refused with the reason.
TEST(DataParallelCommand, TwoRanksOnTwoGpusFollowOneGpu) {
  const auto info = nlohmann::json::parse(run("info --json").out);
  const std::string gpu = kMlp + " --device cuda";
  const std::string nccl = info["nccl"]["unavailable"].get<std::string>();
  if (info["cuda"]["devices"].size() < 2 || !nccl.empty()) {
    const Result r = shell(mpirun(2) + gpu);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find(": --device cuda"), std::string::npos) << r.err;
    GTEST_SKIP() << "needs 2 GPUs and NCCL (" << info["cuda"]["devices"].size() << " GPUs; NCCL: "
                 << (nccl.empty() ? "yes" : nccl) << ")";
  }
  const Result one = run(gpu);
  const Result two = shell(mpirun(2) + gpu);
  ASSERT_EQ(one.status, 0) << one.err;
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_EQ(lines(two.out), 1) << two.out;
  EXPECT_NEAR(final_val_loss(two.out), final_val_loss(one.out), 1e-3 * final_val_loss(one.out));
  const Result bf16 = shell(mpirun(2) + gpu + " --grad-reduce bf16");
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  EXPECT_NEAR(final_val_loss(bf16.out), final_val_loss(one.out), 0.01 * final_val_loss(one.out));
}

TEST(DataParallelCommand, RefusesABatchThatDoesNotSplitAndABadWireFormat) {
  const Result odd = shell(mpirun(2) + kMlpFlags + " --batch-size 63");
  EXPECT_NE(odd.status, 0);
  EXPECT_NE(odd.err.find("--batch-size 63 does not split over 2 ranks"), std::string::npos) << odd.err;
  const Result wire = run(kMlp + " --grad-reduce fp8");
  EXPECT_EQ(wire.status, 2);
  EXPECT_EQ(wire.err, "mantissa: --grad-reduce: 'fp8' is not f32, bf16 or fp16\n");
}

// Ranks started with other settings or other data (mpirun's "A : B"): stopped before they train, with one
// line naming the first setting that differs, never a crash (parameters of other shapes broadcast into
// each other overran memory).
TEST(DataParallelCommand, RanksThatDifferAreRefusedBeforeTheyTrain) {
  const auto two = [](const std::string& a, const std::string& b) {
    return shell(std::string(MANTISSA_MPIEXEC) + " -np 1 " + MANTISSA_CLI + " " + a + " : -np 1 " + MANTISSA_CLI + " " + b);
  };
  const std::string mlp = "train --model mlp --steps 40 --eval-every 40 --seed 3 --threads 1 --batch-size 64";
  const Result hidden = two(mlp + " --hidden 64", mlp + " --hidden 32");
  EXPECT_NE(hidden.status, 0);
  EXPECT_NE(hidden.err.find("rank 1's settings differ from rank 0's: --hidden (rank 0: 64)"), std::string::npos) << hidden.err;
  EXPECT_EQ(hidden.err.find("signal"), std::string::npos) << hidden.err;
  const Result lr = two(mlp, mlp + " --lr 2e-3");
  EXPECT_NE(lr.err.find("--lr (rank 0: 0.001)"), std::string::npos) << lr.err;
  // The same flags on other data: the data's contents differ.
  Scratch s;
  const std::string a = s.path("a.txt"), b = s.path("b.txt");
  { std::ofstream(a) << std::string(4000, 'a'); }
  { std::ofstream(b) << std::string(4000, 'b'); }
  const std::string gpt = "train --model gpt --n-layer 1 --n-embd 16 --n-head 2 --block-size 8 --batch-size 4 --steps 2 "
                          "--eval-every 2 --eval-batches 1 --threads 1 --data ";
  const Result data = two(gpt + a, gpt + b);
  EXPECT_NE(data.err.find("rank 1's settings differ from rank 0's: data (rank 0: 3600 + 400 bytes, crc32 "), std::string::npos)
      << data.err;
}

TEST(DataParallelCommand, AKilledRankEndsTheJobWithinSecondsAndTheCheckpointsStayIntact) {
  Scratch s;
  const std::string dir = s.path("ckpt");
  Background job(mpirun(2) + "train --model mlp --hidden 64 --steps 100000 --batch-size 64 --eval-every 100000 --threads 1 "
                             "--checkpoint-every 20 --checkpoint-dir " + dir, s.dir);
  // Once a few checkpoints are written, kill rank 1 as the kernel's OOM killer or a failed node would.
  const auto t0 = Clock::now();
  while (std::filesystem::exists(dir) == false || std::distance(std::filesystem::directory_iterator(dir), {}) < 2) {
    ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 120) << "no checkpoints: " << job.err();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const pid_t victim = rank_process(dir, 1);
  ASSERT_GT(victim, 0);
  kill(victim, SIGKILL);
  const auto killed = Clock::now();
  const int status = job.wait(60);
  ASSERT_NE(status, -1) << "the job did not end within 60 s of a rank's death";
  EXPECT_NE(status, 0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed).count(), 30);
  EXPECT_NE(job.err().find("rank 1"), std::string::npos) << job.err();
  EXPECT_NE(job.err().find("signal 9"), std::string::npos) << job.err();
  // The newest checkpoint is whole: a run of one process resumes from it for 5 more steps.
  std::vector<std::string> names;  // (a write cut short leaves a .tmp file beside them, never a torn checkpoint)
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") names.push_back(e.path().filename());
  }
  std::sort(names.begin(), names.end());
  const long newest = std::stol(names.back().substr(names.back().find('-') + 1));
  const Result resumed = run("train --model mlp --hidden 64 --batch-size 64 --threads 1 --checkpoint-dir " + dir +
                             " --resume --steps " + std::to_string(newest + 5) + " --json");
  EXPECT_EQ(resumed.status, 0) << resumed.err;
}

TEST(DataParallelCommand, AStoppedRankEndsTheJobAfterTheTimeoutWithOneLine) {
  Scratch s;
  Background job(mpirun(2) + "train --model mlp --hidden 64 --steps 100000 --batch-size 64 --eval-every 100000 --threads 1 "
                             "--dist-timeout 3 --seed 11 --metrics " + s.path("m.jsonl"), s.dir);
  const auto t0 = Clock::now();
  while (!std::filesystem::exists(s.path("m.jsonl")) || std::filesystem::file_size(s.path("m.jsonl")) < 2000) {
    ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 120) << "no steps: " << job.err();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const pid_t victim = rank_process(s.path("m.jsonl"), 1);
  ASSERT_GT(victim, 0);
  kill(victim, SIGSTOP);  // alive but silent: a hung rank, which no exit status would reveal
  const int status = job.wait(60);
  kill(victim, SIGKILL);
  ASSERT_NE(status, -1) << "the job hung";
  EXPECT_EQ(status, 4);
  EXPECT_NE(job.err().find("mantissa: rank 0: "), std::string::npos) << job.err();
  EXPECT_NE(job.err().find("s for the other ranks (one of them died or hangs); stopping all 2 ranks"), std::string::npos)
      << job.err();
}

// Two network namespaces joined by a bridge, each holding one rank: the gradients cross veth interfaces
// over TCP instead of shared memory. Made and removed by the test (needs CAP_NET_ADMIN, as root has).
class Namespaces {
 public:
  Namespaces() : id_(std::to_string(::getpid() % 100000)), net_("10.231." + std::to_string(::getpid() % 250) + ".") {
    ok_ = sh("ip link add mtb" + id_ + " type bridge") && sh("ip addr add " + net_ + "254/24 dev mtb" + id_) &&
          sh("ip link set mtb" + id_ + " up");
    for (int r = 0; ok_ && r < 2; ++r) {
      const std::string ns = name(r), host = "mth" + id_ + "_" + std::to_string(r), inner = "mtv" + id_ + "_" + std::to_string(r);
      ok_ = sh("ip netns add " + ns) && sh("ip link add " + host + " type veth peer name " + inner) &&
            sh("ip link set " + inner + " netns " + ns) && sh("ip link set " + host + " master mtb" + id_) &&
            sh("ip link set " + host + " up") && sh("ip -n " + ns + " addr add " + net_ + std::to_string(r + 1) + "/24 dev " + inner) &&
            sh("ip -n " + ns + " link set " + inner + " up") && sh("ip -n " + ns + " link set lo up");
    }
  }
  ~Namespaces() {
    for (int r = 0; r < 2; ++r) {
      sh("ip netns del " + name(r));
      sh("ip link del mth" + id_ + "_" + std::to_string(r));
    }
    sh("ip link del mtb" + id_);
  }
  Namespaces(const Namespaces&) = delete;
  Namespaces& operator=(const Namespaces&) = delete;
  bool ok() const { return ok_; }
  std::string name(int rank) const { return "mtn" + id_ + "_" + std::to_string(rank); }
  std::string subnet() const { return net_ + "0/24"; }
  // Bytes the bridge port of rank 1's namespace has carried from it.
  long received_from_rank1() const {
    return std::stol(slurp("/sys/class/net/mth" + id_ + "_1/statistics/rx_bytes"));
  }

 private:
  static bool sh(const std::string& c) { return std::system((c + " >/dev/null 2>&1").c_str()) == 0; }
  std::string id_, net_;
  bool ok_ = false;
};

TEST(DataParallelCommand, TwoRanksInTwoNetworkNamespacesTrainOverTcp) {
  const Namespaces ns;
  if (!ns.ok()) GTEST_SKIP() << "cannot make network namespaces here (needs root or CAP_NET_ADMIN, and iproute2)";
  const Result local = shell(mpirun(2) + kMlp);
  ASSERT_EQ(local.status, 0) << local.err;
  const long before = ns.received_from_rank1();
  // Each rank enters its namespace; TCP only, on the bridge's subnet; the launcher's own (PMIx) server
  // listens there too, since the ranks' loopback is their namespace's.
  const std::string enter = "sh -c 'exec ip netns exec " + ns.name(0).substr(0, ns.name(0).size() - 1) +
                            "$OMPI_COMM_WORLD_RANK \"$0\" \"$@\"' ";
  const std::string line = "env PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=" + ns.subnet() + " " +
                           MANTISSA_MPIEXEC + " -np 2 --mca btl tcp,self --mca btl_tcp_if_include " + ns.subnet() + " " +
                           enter + MANTISSA_CLI + " " + kMlp;
  const Result far = shell(line);
  ASSERT_EQ(far.status, 0) << line << "\n" << far.err;
  // The reduction is the same arithmetic in the same order whatever carries the bytes: the same result.
  EXPECT_EQ(final_val_loss(far.out), final_val_loss(local.out));
  EXPECT_GT(ns.received_from_rank1() - before, 1 << 20) << "the gradients did not cross rank 1's interface";
}

}  // namespace
