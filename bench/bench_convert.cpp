// Bulk conversion speed against the machine's memory bandwidth, measured in the same run.
//
// fp32 -> bf16 / fp16 / e4m3 and back, on 64 MiB of fp32 (16 Mi values), on all threads, beside a plain
// parallel copy of the same 64 MiB. Bandwidth counts bytes read plus bytes written. At the end it
// prints each conversion's bandwidth as a fraction of the copy's (target: 70% or more for bf16 and
// fp16 with the best kernels). Kernel levels can be compared with --benchmark_filter.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mantissa/numeric/bulk.h"

namespace {

using mantissa::Format;
using mantissa::Isa;

constexpr std::size_t kValues = std::size_t{16} << 20;  // 64 MiB of fp32

const std::vector<float>& source() {
  static const std::vector<float> v = [] {
    std::vector<float> x(kValues);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& f : x) f = normal(rng);
    return x;
  }();
  return v;
}

void report_bandwidth(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] = benchmark::Counter(bytes_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = omp_get_max_threads();
}

void BM_Copy(benchmark::State& state) {
  const std::vector<float>& src = source();
  std::vector<float> dst(kValues, 1.0f);
  constexpr std::ptrdiff_t kBlock = 1 << 16;
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t b = 0; b < static_cast<std::ptrdiff_t>(kValues) / kBlock; ++b) {
      std::memcpy(dst.data() + b * kBlock, src.data() + b * kBlock, kBlock * sizeof(float));
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  report_bandwidth(state, 2.0 * kValues * sizeof(float));
}

void BM_Encode(benchmark::State& state, Format f, mantissa::Rounding rounding, Isa isa) {
  if (!mantissa::isa_supported(isa)) {
    state.SkipWithError("kernel level not supported on this CPU");
    return;
  }
  const mantissa::IsaScope scope(isa);
  const std::vector<float>& src = source();
  std::vector<std::uint8_t> dst(kValues * static_cast<std::size_t>(f.storage_bytes()), 1);
  for (auto _ : state) {
    mantissa::encode_array(f, src.data(), dst.data(), kValues, {rounding, false, 7});
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  report_bandwidth(state, static_cast<double>(kValues) * (sizeof(float) + static_cast<double>(f.storage_bytes())));
}

void BM_Decode(benchmark::State& state, Format f, Isa isa) {
  if (!mantissa::isa_supported(isa)) {
    state.SkipWithError("kernel level not supported on this CPU");
    return;
  }
  const mantissa::IsaScope scope(isa);
  std::vector<std::uint8_t> packed(kValues * static_cast<std::size_t>(f.storage_bytes()));
  mantissa::encode_array(f, source().data(), packed.data(), kValues);
  std::vector<float> dst(kValues, 1.0f);
  for (auto _ : state) {
    mantissa::decode_array(f, packed.data(), dst.data(), kValues);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  report_bandwidth(state, static_cast<double>(kValues) * (sizeof(float) + static_cast<double>(f.storage_bytes())));
}

constexpr auto kNearest = mantissa::Rounding::nearest_even;
constexpr auto kStochastic = mantissa::Rounding::stochastic;

void register_all() {
  benchmark::RegisterBenchmark("copy/fp32", BM_Copy)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (Isa isa : {Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::portable}) {
    const std::string level(mantissa::isa_name(isa));
    const auto add = [&](const std::string& name, auto&&... args) {
      benchmark::RegisterBenchmark((name + "/" + level).c_str(), args...)->UseRealTime()->Unit(benchmark::kMillisecond);
    };
    add("encode/bf16", BM_Encode, Format::bf16(), kNearest, isa);
    add("encode/fp16", BM_Encode, Format::fp16(), kNearest, isa);
    add("encode/bf16_stochastic", BM_Encode, Format::bf16(), kStochastic, isa);
    add("encode/e4m3", BM_Encode, Format::e4m3(), kNearest, isa);
    add("decode/bf16", BM_Decode, Format::bf16(), isa);
    add("decode/fp16", BM_Decode, Format::fp16(), isa);
  }
}

// Prints the usual table, then every run's bandwidth as a fraction of the copy's.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    // One figure per benchmark: the median when repeated (--benchmark_repetitions), else the run.
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (run.run_type == Run::RT_Aggregate && !median) continue;
      const auto it = run.counters.find("GB/s");
      if (it == run.counters.end()) continue;
      std::string name = run.run_name.str();
      if (const auto at = name.find("/real_time"); at != std::string::npos) name.erase(at);
      if (median || gbps_.count(name) == 0) gbps_[name] = it->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    double copy = 0;
    for (const auto& [name, v] : gbps_) {
      if (name.rfind("copy/", 0) == 0) copy = v;
    }
    if (copy <= 0) return;
    std::printf("\nbandwidth (read + written) relative to the plain copy, %.1f GB/s, same run (%d threads):\n",
                copy, omp_get_max_threads());
    for (const auto& [name, v] : gbps_) {
      if (name.rfind("copy/", 0) != 0) std::printf("  %-36s %6.1f GB/s  %5.1f%%\n", name.c_str(), v, 100 * v / copy);
    }
  }

 private:
  std::map<std::string, double> gbps_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
