// Where a result was made, for the records that keep it (the paper's tables, a metrics file's run
// record): the CPU's name, the threads, the time (UTC), mantissa's version.
#pragma once

#include <string>

namespace mantissa::cli {

// "AMD EPYC 7B13" from /proc/cpuinfo, or "an unknown CPU".
std::string cpu_name();
// The current time in UTC, as strftime's `format` writes it ("%Y-%m-%dT%H:%M:%SZ": ISO 8601).
std::string utc_now(const char* format = "%Y-%m-%dT%H:%M:%SZ");
// Seconds since the Unix epoch, to the microsecond (a metrics record's wall_time).
double unix_time();
// The most threads --threads may ask for here, and why (empty when it is the fixed bound, 4096): a
// process whose address space is limited (ulimit -v) cannot map a stack for each of thousands of
// threads, and OpenMP aborts the process when one fails; so the cap leaves half of what the limit
// leaves free to the stacks (the default thread stack size, OMP_STACKSIZE aside).
struct ThreadCap {
  int threads;
  std::string why;  // "the address space limit (8 GiB) leaves room for 450 more stacks of 8 MiB"
};
ThreadCap thread_cap();
// "0.1.0", from the project's version.
const char* version();

}  // namespace mantissa::cli
