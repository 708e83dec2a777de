// RuleSource owns the current RuleSet of one rules file and replaces it, whole, when the file
// changes or reload() is called; a file with any error is refused and the old rules stay
// (docs/RULES.md, "Reloading").
//
// Threads: current() may be called from any thread at any time; a request takes one snapshot
// and decides under it from start to end. reload() and check_now() may be called from any
// thread; attempts are serialized. With `watch`, one thread of its own watches the file
// (inotify on the file's directory and on its resolved target's directory, and a periodic
// check) and stops in the destructor. The log callback is called from whichever thread made
// the attempt, never two at once, with the attempt in progress: it must not call back into
// the source.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/expected.h"
#include "rules/rule_set.h"

namespace sluice::rules {

struct RuleSourceOptions {
  // How often the file is looked at (resolved path, inode, size, mtime, ctime) besides inotify;
  // 0 = never.
  std::chrono::milliseconds poll_interval{1000};
  // A burst of events is acted on once none has come for this long (at the latest 10 times
  // this long after the first).
  std::chrono::milliseconds debounce{100};
  bool watch = true;  // false: no thread; only reload() and check_now() look at the file
  RuleSetOptions rules;
};

enum class ReloadStatus : std::uint8_t {
  kReloaded,   // new rules are in force
  kUnchanged,  // the file holds the rules in force (or, for a check, the bytes last refused)
  kRefused,    // the file is bad or cannot be read; the old rules stay
};
std::string_view reload_status_name(ReloadStatus status);  // "reloaded", "unchanged", "refused"

struct ReloadOutcome {
  ReloadStatus status = ReloadStatus::kUnchanged;
  std::vector<Diagnostic> diagnostics;  // kRefused: why
  std::string hash;                     // of the rules in force afterwards
};

class RuleSource {
 public:
  // One call per event: a reload, a refusal (then one diagnostic per further line).
  using Log = std::function<void(std::string_view message)>;

  // Loads `file`; every diagnostic of the file when it is bad or cannot be read.
  static Expected<std::unique_ptr<RuleSource>, std::vector<Diagnostic>> open(
      std::filesystem::path file, Log log, RuleSourceOptions options = {});
  ~RuleSource();
  RuleSource(const RuleSource&) = delete;
  RuleSource& operator=(const RuleSource&) = delete;

  std::shared_ptr<const RuleSet> current() const;

  // Rereads the file now (the gateway calls it on SIGHUP). Every refusal is logged and
  // counted, even of bytes refused before: an operator asked.
  ReloadOutcome reload();
  // What the watcher does on an event, now: reads the file and takes it when its bytes are
  // neither those in force nor those last refused (so a bad file is logged and counted once).
  ReloadOutcome check_now();

  // For metrics: attempts that swapped new rules in, and those that refused a file.
  std::uint64_t reloads_ok() const { return reloads_ok_.load(std::memory_order_relaxed); }
  std::uint64_t reloads_failed() const { return reloads_failed_.load(std::memory_order_relaxed); }
  // Reloads and refusals together; wait_for_attempts() waits until it reaches `count`.
  std::uint64_t attempts() const;
  bool wait_for_attempts(std::uint64_t count, std::chrono::milliseconds timeout) const;

  const std::filesystem::path& path() const { return path_; }

 private:
  // What the periodic check compares: a change in any of these is a change of the file.
  struct Fingerprint {
    bool exists = false;
    std::string resolved;  // the path through every symlink
    std::uint64_t device = 0, inode = 0, size = 0;
    std::int64_t mtime_ns = 0, ctime_ns = 0;
    std::string listing;  // a directory: its rules files' own fingerprints
    friend bool operator==(const Fingerprint&, const Fingerprint&) = default;
  };
  static Fingerprint fingerprint(const std::filesystem::path& file);

  RuleSource(std::filesystem::path file, Log log, RuleSourceOptions options,
             std::shared_ptr<const RuleSet> initial, Fingerprint seen);

  enum class Trigger { kExplicit, kEvent, kPoll };
  ReloadOutcome attempt(Trigger trigger);
  void finish_attempt();
  void watch_loop();

  const std::filesystem::path path_;
  const Log log_;
  const RuleSourceOptions options_;

  mutable std::mutex current_mutex_;
  std::shared_ptr<const RuleSet> current_;  // guarded by current_mutex_

  std::mutex attempt_mutex_;  // serializes attempts; guards the fields below
  Fingerprint seen_;          // when the file was last read
  std::string refused_hash_;  // the bytes last refused ("" = none since the last reload)
  bool missing_logged_ = false;

  std::atomic<std::uint64_t> reloads_ok_{0};
  std::atomic<std::uint64_t> reloads_failed_{0};
  mutable std::mutex attempts_mutex_;
  mutable std::condition_variable attempts_changed_;
  std::uint64_t attempts_ = 0;  // guarded by attempts_mutex_

  void update_watches();

  // The watcher's: set up in the constructor, then touched by the watcher thread alone.
  int inotify_fd_ = -1;
  bool is_directory_ = false;  // the path is a rules directory (watched itself)
  int dir_watch_ = -1;         // the path's directory, or the path when it is a directory
  int target_watch_ = -1;      // the directory of the file the path resolves to
  std::string target_dir_;
  std::string target_name_;
  int wake_fd_ = -1;  // eventfd: the destructor's stop signal to the watcher
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

}  // namespace sluice::rules
