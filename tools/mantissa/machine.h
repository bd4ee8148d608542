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
// "0.1.0", from the project's version.
const char* version();

}  // namespace mantissa::cli
