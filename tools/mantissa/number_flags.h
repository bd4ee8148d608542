// Every number given on the command line goes through the library's one parser (parse_number): CLI11
// would read "010" as eight, "0x10" as sixteen, "-1" as a huge unsigned seed and "0x1p-3" as a learning
// rate. route_number_flags() puts a check before CLI11's own conversion on every numeric flag of a
// command and its subcommands, so a flag added later is covered by construction (tests/cli's
// NumberFlags case feeds every numeric flag of every command the same hostile values).
#pragma once

#include <CLI/CLI.hpp>

namespace mantissa::cli {

// For each option of app and of its subcommands whose value is an integer (INT, UINT) or a real
// (FLOAT): the text is checked by parse_number (decimal, no trailing text, within 64 bits or f64's
// finite range) and handed on in canonical decimal, which CLI11 then converts into the flag's own type
// (its range errors remain, with the flag's name).
// Every --threads is also bounded: 0 (all of this machine's) to what this process can start
// (thread_cap(), machine.h). And every option that takes a value refuses an empty one ("--data ''"
// would otherwise mean the default, silently).
void route_number_flags(CLI::App& app);
// --threads N checked against thread_cap(): empty where N can run, else the refusal naming the cap.
std::string thread_count_problem(long long threads);
// The one place a command sets its thread count: --threads N, or with 0 OpenMP's own (OMP_NUM_THREADS,
// else the cores), each checked against thread_cap() (a UsageError naming where the count came from).
// Returns the count.
int use_threads(int requested);

}  // namespace mantissa::cli
