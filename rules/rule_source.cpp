#include "rules/rule_source.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/clock.h"
#include "rules/debouncer.h"
#include "rules/read_file.h"

namespace sluice::rules {

namespace fs = std::filesystem;

namespace {

// Every way a directory entry can come, go or change; the directory's own end too.
constexpr std::uint32_t kWatchMask = IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_CREATE |
                                     IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                                     IN_MOVE_SELF;

std::string resolve(const fs::path& file) {
  std::error_code ec;
  const fs::path resolved = fs::canonical(file, ec);
  return ec ? std::string() : resolved.string();
}

std::string summary(const RuleSet& set) {
  std::string envoy;
  if (!set.envoy().empty()) {
    envoy = std::to_string(set.envoy().domain_count()) + " envoy domains (" +
            std::to_string(set.envoy().limit_count()) + " limits), ";
  }
  return std::to_string(set.policies().size()) + " policies, " +
         std::to_string(set.matches().size()) + " matches, " + envoy + "hash " +
         std::string(set.hash());
}

}  // namespace

std::string_view reload_status_name(ReloadStatus status) {
  switch (status) {
    case ReloadStatus::kReloaded:
      return "reloaded";
    case ReloadStatus::kUnchanged:
      return "unchanged";
    case ReloadStatus::kRefused:
      return "refused";
  }
  return "unknown";
}

RuleSource::Fingerprint RuleSource::fingerprint(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return {};
  Fingerprint f;
  f.exists = true;
  f.resolved = resolve(file);
  f.device = st.st_dev;
  f.inode = st.st_ino;
  f.size = static_cast<std::uint64_t>(st.st_size);
  f.mtime_ns = st.st_mtim.tv_sec * 1'000'000'000ll + st.st_mtim.tv_nsec;
  f.ctime_ns = st.st_ctim.tv_sec * 1'000'000'000ll + st.st_ctim.tv_nsec;
  if (S_ISDIR(st.st_mode)) {
    // A directory changes when any file in it does: each entry's own fingerprint, in order.
    std::vector<std::string> entries;
    std::error_code ec;
    for (fs::directory_iterator it(file, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.starts_with('.')) continue;
      const Fingerprint e = fingerprint(it->path());
      entries.push_back(name + "|" + e.resolved + "|" + std::to_string(e.inode) + "|" +
                        std::to_string(e.size) + "|" + std::to_string(e.mtime_ns) + "|" +
                        std::to_string(e.ctime_ns));
    }
    std::sort(entries.begin(), entries.end());
    for (const std::string& e : entries) f.listing += e + "\n";
  }
  return f;
}

Expected<std::unique_ptr<RuleSource>, std::vector<Diagnostic>> RuleSource::open(
    fs::path file, Log log, RuleSourceOptions options) {
  // Looked at before it is read: a change made meanwhile differs from what is remembered.
  Fingerprint seen = fingerprint(file);
  auto parsed = RuleSet::load(file, options.rules);
  if (!parsed) return Unexpected{parsed.error()};
  auto initial = std::make_shared<const RuleSet>(std::move(parsed).value());
  return std::unique_ptr<RuleSource>(new RuleSource(std::move(file), std::move(log), options,
                                                    std::move(initial), std::move(seen)));
}

RuleSource::RuleSource(fs::path file, Log log, RuleSourceOptions options,
                       std::shared_ptr<const RuleSet> initial, Fingerprint seen)
    : path_(std::move(file)),
      log_(std::move(log)),
      options_(options),
      current_(std::move(initial)),
      seen_(std::move(seen)) {
  if (!options_.watch) return;
  // The watches are in place before open() returns: a change made right after is an event.
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0 && log_) {
    log_("rules: inotify unavailable (" + std::string(std::strerror(errno)) + "); checking " +
         path_.string() + " every " + std::to_string(options_.poll_interval.count()) + " ms only");
  }
  update_watches();
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  watcher_ = std::thread([this] { watch_loop(); });
}

RuleSource::~RuleSource() {
  if (watcher_.joinable()) {
    stop_.store(true);
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
    watcher_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

std::shared_ptr<const RuleSet> RuleSource::current() const {
  std::lock_guard lock(current_mutex_);
  return current_;
}

ReloadOutcome RuleSource::reload() { return attempt(Trigger::kExplicit); }
ReloadOutcome RuleSource::check_now() { return attempt(Trigger::kEvent); }

std::uint64_t RuleSource::attempts() const {
  std::lock_guard lock(attempts_mutex_);
  return attempts_;
}

bool RuleSource::wait_for_attempts(std::uint64_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(attempts_mutex_);
  return attempts_changed_.wait_for(lock, timeout, [&] { return attempts_ >= count; });
}

void RuleSource::finish_attempt() {
  {
    std::lock_guard lock(attempts_mutex_);
    ++attempts_;
  }
  attempts_changed_.notify_all();
}

ReloadOutcome RuleSource::attempt(Trigger trigger) {
  std::lock_guard lock(attempt_mutex_);
  const std::shared_ptr<const RuleSet> in_force = current();
  ReloadOutcome outcome;
  outcome.hash = in_force->hash();
  const auto keeping = [&] {
    return "; keeping the rules in force (hash " + std::string(in_force->hash()) + ")";
  };

  const Fingerprint now = fingerprint(path_);
  if (trigger == Trigger::kPoll && now == seen_) return outcome;
  seen_ = now;

  auto bytes = read_rules(path_);
  if (!bytes) {
    // A file that is gone stays gone until it is back: one refusal, not one per event.
    if (trigger != Trigger::kExplicit && missing_logged_) return outcome;
    missing_logged_ = true;
    outcome.status = ReloadStatus::kRefused;
    outcome.diagnostics.push_back(
        Diagnostic{path_.string(), 0, 0, "cannot read the file: " + bytes.error()});
    reloads_failed_.fetch_add(1, std::memory_order_relaxed);
    if (log_) log_("rules: cannot read " + path_.string() + " (" + bytes.error() + ")" + keeping());
    finish_attempt();
    return outcome;
  }
  missing_logged_ = false;

  const std::string hash = rules_hash(*bytes, path_.string());
  if (hash == in_force->hash()) {
    refused_hash_.clear();
    return outcome;
  }
  if (trigger != Trigger::kExplicit && hash == refused_hash_) return outcome;

  const bool one_file = bytes->size() == 1 && bytes->front().name == path_.string();
  auto parsed = one_file ? RuleSet::parse(bytes->front().bytes, path_.string(), options_.rules)
                         : RuleSet::parse_files(*bytes, path_.string(), options_.rules);
  if (!parsed) {
    refused_hash_ = hash;
    outcome.status = ReloadStatus::kRefused;
    outcome.diagnostics = parsed.error();
    reloads_failed_.fetch_add(1, std::memory_order_relaxed);
    if (log_) {
      std::string message = "rules: refused " + path_.string() + " (hash " + hash + "), " +
                            std::to_string(outcome.diagnostics.size()) + " errors" + keeping() +
                            ":";
      for (const Diagnostic& d : outcome.diagnostics) message += "\n  " + d.to_string();
      log_(message);
    }
    finish_attempt();
    return outcome;
  }

  auto next = std::make_shared<const RuleSet>(std::move(parsed).value());
  const std::string was(in_force->hash());
  const std::string next_summary = summary(*next);
  {
    std::lock_guard swap(current_mutex_);
    current_ = std::move(next);
  }
  refused_hash_.clear();
  outcome.status = ReloadStatus::kReloaded;
  outcome.hash = hash;
  reloads_ok_.fetch_add(1, std::memory_order_relaxed);
  if (log_) log_("rules: reloaded " + path_.string() + ": " + next_summary + " (was " + was + ")");
  finish_attempt();
  return outcome;
}

// The watcher: inotify on the path's directory (a rename over the file, a ConfigMap's ..data
// swap) and on the directory of the file it resolves to (a rewrite in place, through a
// symlink), re-aimed whenever the resolved file moves; a periodic check catches what inotify
// cannot see. Events only arm the debouncer; the attempt comes once they stop.
void RuleSource::update_watches() {
  if (inotify_fd_ < 0) return;
  if (dir_watch_ < 0) {
    // A rules directory is watched itself (every file in it counts); a file, in its directory.
    std::error_code ec;
    is_directory_ = fs::is_directory(path_, ec);
    const fs::path dir = is_directory_             ? path_
                         : path_.has_parent_path() ? path_.parent_path()
                                                   : fs::path(".");
    dir_watch_ = ::inotify_add_watch(inotify_fd_, dir.c_str(), kWatchMask);
  }
  if (is_directory_) return;
  const fs::path resolved = resolve(path_);
  const std::string resolved_dir = resolved.empty() ? "" : resolved.parent_path().string();
  if (resolved_dir == target_dir_ && (target_watch_ >= 0 || resolved_dir.empty())) return;
  // inotify gives one watch per directory: the two may be the same one.
  if (target_watch_ >= 0 && target_watch_ != dir_watch_) {
    ::inotify_rm_watch(inotify_fd_, target_watch_);
  }
  target_watch_ = resolved_dir.empty()
                      ? -1
                      : ::inotify_add_watch(inotify_fd_, resolved_dir.c_str(), kWatchMask);
  target_dir_ = resolved_dir;
  target_name_ = resolved.filename().string();
}

void RuleSource::watch_loop() {
  const std::string name = path_.filename().string();
  const std::uint64_t debounce_ns =
      static_cast<std::uint64_t>(options_.debounce.count()) * 1'000'000;
  const std::uint64_t poll_ns =
      static_cast<std::uint64_t>(options_.poll_interval.count()) * 1'000'000;
  Debouncer debouncer(debounce_ns, 10 * debounce_ns);
  std::uint64_t next_poll = poll_ns == 0 ? Debouncer::kNever : monotonic_now_ns() + poll_ns;
  alignas(inotify_event) char buffer[16 * 1024];

  // A change made between the first read and the first watch: seen by comparing now.
  attempt(Trigger::kPoll);
  while (!stop_.load()) {
    update_watches();
    std::uint64_t now = monotonic_now_ns();
    const std::uint64_t wake_at = std::min(debouncer.due_ns(), next_poll);
    int timeout_ms = -1;
    if (wake_at != Debouncer::kNever) {
      const std::uint64_t wait_ns = wake_at > now ? wake_at - now : 0;
      timeout_ms =
          static_cast<int>(std::min<std::uint64_t>((wait_ns + 999'999) / 1'000'000, 3'600'000));
    }
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
    ::poll(fds, inotify_fd_ >= 0 ? 2 : 1, timeout_ms);
    if (stop_.load()) break;

    if (inotify_fd_ >= 0 && (fds[1].revents & POLLIN) != 0) {
      for (;;) {
        const ssize_t n = ::read(inotify_fd_, buffer, sizeof buffer);
        if (n <= 0) break;
        for (ssize_t at = 0; at < n;) {
          const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
          at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
          const std::string_view entry = event->len > 0 ? std::string_view(event->name) : "";
          bool relevant =
              (event->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_Q_OVERFLOW)) != 0;
          // In the path's directory: the file itself, or a ConfigMap's "..data" links.
          if (event->wd == dir_watch_ && (entry == name || entry.starts_with(".."))) {
            relevant = true;
          }
          // In a rules directory: any file but a dot-file (a ConfigMap's "..data" included).
          if (is_directory_ && event->wd == dir_watch_ &&
              (!entry.starts_with('.') || entry.starts_with(".."))) {
            relevant = true;
          }
          if (event->wd == target_watch_ && entry == target_name_) relevant = true;
          if ((event->mask & IN_IGNORED) != 0) {
            if (event->wd == dir_watch_) dir_watch_ = -1;
            if (event->wd == target_watch_) target_watch_ = -1;
          }
          if (relevant) debouncer.note_event(monotonic_now_ns());
        }
      }
    }
    now = monotonic_now_ns();
    if (debouncer.due(now)) {
      debouncer.clear();
      attempt(Trigger::kEvent);
    }
    if (now >= next_poll) {
      next_poll = now + poll_ns;
      attempt(Trigger::kPoll);
    }
  }
}

}  // namespace sluice::rules
