// SIGINT, SIGTERM and SIGHUP end every tool the same way (issue 21): child process groups stopped
// and reaped, private temp dirs removed, open run rows closed with 128+signal, exit 128+signal.
#pragma once
#include <sys/types.h>

#include <functional>
#include <mutex>
#include <string>

namespace ca::signals {

// Installs the handlers and the thread that acts on them; Cli::run calls it, once per process.
// The handler only writes the signal number to a pipe; the work is done on that thread, where
// it may take locks, wait for children and talk to SQLite.
void install();

// The first signal received (0 if none). Once it is set the process is ending: no new child is
// started (fork_child throws), end_run leaves the row to the signal path.
int received();
bool stopping();

// A tool that can finish or mark the work in flight sets this: the first signal calls it on the
// signal thread instead of ending the process; a second signal ends it as above.
void set_graceful_handler(std::function<void(int signal)> handler);

// fork() with the child registered before any signal can be acted on, so it is never missed.
// Returns what fork returns; throws EnvironmentError once a signal is being handled.
pid_t fork_child(bool own_process_group, const std::string& what);
void forget_child(pid_t pid);  // reaped by its owner

// Private temp dirs removed on a signal (PrivateTempDir registers itself).
void add_temp_dir(const std::string& path);
void remove_temp_dir(const std::string& path);

// Run at the end of every tool with its exit code (Cli::run), or on the signal thread with
// 128+signal once the children are reaped; each must be safe to run more than once. The store
// closes the run rows its tool left open here. Returns an id for remove_cleanup.
int add_cleanup(std::function<void(int exit_code)> cleanup);
void remove_cleanup(int id);
void run_cleanups(int exit_code);

// Held while one record line is written: the process never ends on a signal half-way through one.
std::timed_mutex& output_mutex();

// Blocks the calling thread for good when a signal is being handled (the signal thread ends the
// process): Cli::run calls it so that main() does not return a code of its own meanwhile.
void wait_if_stopping();

}  // namespace ca::signals
