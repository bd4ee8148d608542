// Signals as stop requests; see interrupt.h.
//
// No handler runs on a computing thread: SIGINT and SIGTERM are blocked in every thread but one that
// only waits for them (sigwait). A handler used to run on whichever thread the kernel chose, in the
// middle of a oneDNN kernel or an OpenMP barrier, and about one Ctrl-C in fifteen under load ended in a
// heap corruption inside oneDNN's next product ("corrupted size vs. prev_size"); waited for instead, a
// signal interrupts nothing.
#include "interrupt.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <thread>

namespace mantissa::cli {
namespace {

std::atomic<int> g_caught{0};
std::atomic<bool> g_catching{false};
std::atomic<bool> g_routed{false};

sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

// The signal's default action (the process ends, as killed by it), on this thread, the only one that
// does not block it.
[[noreturn]] void die_of(int signal) {
  std::signal(signal, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signal);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(signal);
  std::_Exit(128 + signal);  // (not reached)
}

void wait_for_signals() {
  const sigset_t s = stop_signals();
  for (;;) {
    int signal = 0;
    if (sigwait(&s, &signal) != 0) continue;
    // While a StopOnSignal lives, the first is a request; any other ends the process, as before.
    int none = 0;
    if (!(g_catching.load() && g_caught.compare_exchange_strong(none, signal))) die_of(signal);
  }
}

}  // namespace

void route_stop_signals() {
  if (g_routed.exchange(true)) return;
  const sigset_t s = stop_signals();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);  // inherited by every thread made from here on
  std::thread(wait_for_signals).detach();
}

StopOnSignal::StopOnSignal() {
  route_stop_signals();
  g_caught = 0;
  g_catching = true;
}

StopOnSignal::~StopOnSignal() { g_catching = false; }

int StopOnSignal::caught() { return g_caught; }

}  // namespace mantissa::cli
