#include "server/etcd_membership.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "cluster/etcd_members.h"
#include "core/utc_time.h"
#include "server/shard.h"

namespace sluice::server {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

// Each call to etcd may take this long (over all endpoints): a keepalive that takes longer is
// no use to the fence anyway, since the next one is due.
milliseconds call_timeout(std::chrono::seconds ttl) {
  return std::max(milliseconds(200), std::chrono::duration_cast<milliseconds>(ttl) / 4);
}

// The fence's clock (boottime_now_ns(): it counts through a suspend, as etcd's does).
std::chrono::nanoseconds now() {
  return std::chrono::nanoseconds(static_cast<std::int64_t>(boottime_now_ns()));
}

etcd::Client::Config etcd_config(const MembershipConfig& config) {
  etcd::Client::Config out;
  out.endpoints = config.endpoints;
  out.timeout = call_timeout(config.ttl);
  out.source_address = config.source_address;
  return out;
}

}  // namespace

EtcdMembership::EtcdMembership(asio::io_context& io, MembershipConfig config, Adopt adopt,
                               WarmUp warm_up, std::atomic<std::uint64_t>& deadline,
                               std::atomic<std::uint8_t>& fence_reason,
                               std::atomic<std::uint32_t>& etcd_endpoint)
    : io_(io),
      config_(std::move(config)),
      adopt_(std::move(adopt)),
      warm_up_(std::move(warm_up)),
      deadline_(deadline),
      fence_reason_(fence_reason),
      etcd_endpoint_(etcd_endpoint),
      fence_timer_(io),
      client_(io, etcd_config(config_)),
      fence_(config_.margin),
      map_confirmed_(config_.ttl, config_.margin),
      key_(cluster::member_key(config_.cluster, config_.node_id)) {}

void EtcdMembership::start() { asio::co_spawn(io_, run(), asio::detached); }

void EtcdMembership::say(const std::string& message) { said_.write(log::Level::kInfo, message); }
void EtcdMembership::warn(const std::string& message) {
  said_.write(log::Level::kWarning, message);
}

void EtcdMembership::publish_fence() {
  const auto deadline = std::min(fence_.deadline(), map_confirmed_.deadline());
  deadline_.store(static_cast<std::uint64_t>(deadline.count()));
  note_fence();
}

void EtcdMembership::note_fence() {
  const auto at = now();
  const cluster::FenceReason reason = cluster::fence_reason(at, fence_, map_confirmed_);
  fence_reason_.store(static_cast<std::uint8_t>(reason));
  if (reason != noted_reason_) {
    const cluster::FenceReason was = std::exchange(noted_reason_, reason);
    if (reason == cluster::FenceReason::kNone) {
      say(ever_open_ ? "serving as primary again" : "fence open: serving as primary");
      ever_open_ = true;
    } else if (was == cluster::FenceReason::kNone) {
      // The fence closes: one line, for the bound that closed it. kNoLease: lose() and stop()
      // say why.
      if (reason == cluster::FenceReason::kLeaseLapsed) {
        warn(
            fmt::format("fenced: no keepalive answered since one sent at {} (lease may have "
                        "lapsed): serving nothing as primary",
                        format_utc_ms(last_answered_)));
      } else if (reason == cluster::FenceReason::kMapUnconfirmed) {
        warn(
            "fenced: no read of the member set confirmed the map in time (map not confirmed): "
            "serving nothing as primary");
      }
    }
    // A reason that changes while the fence stays closed (the other bound passes, or is
    // answered first when etcd is back; a new session's map not yet confirmed) is no change of
    // state: STATS gives the reason now.
  }
  // The reason changes by itself only when a bound passes: look again then.
  std::chrono::nanoseconds next{0};
  for (const auto bound : {fence_.deadline(), map_confirmed_.deadline()}) {
    if (bound > at && (next == std::chrono::nanoseconds::zero() || bound < next)) next = bound;
  }
  if (next == fence_timer_at_ || stopped_) return;
  fence_timer_at_ = next;
  fence_timer_.cancel();
  if (next == std::chrono::nanoseconds::zero()) return;
  fence_timer_.expires_after(next - at);
  fence_timer_.async_wait([this, next](const boost::system::error_code& ec) {
    if (ec || next != fence_timer_at_) return;
    fence_timer_at_ = std::chrono::nanoseconds::zero();
    note_fence();
  });
}

void EtcdMembership::note_member() {
  etcd_endpoint_.store(static_cast<std::uint32_t>(client_.current_endpoint_index()));
  const std::string member = client_.current_endpoint();
  if (member == member_) return;
  say(member_.empty() ? "calls go to etcd member " + member
                      : fmt::format("calls go to etcd member {} (was {})", member, member_));
  member_ = member;
}

void EtcdMembership::lose(const std::string& why) {
  if (lost_) return;
  lost_ = true;
  fence_.lose();
  publish_fence();
  if (cancel_warm_) cancel_warm_();  // a warm-up for a lost session is of no use
  warn(fmt::format("lease {:x} lost ({}): no longer serving as primary; registering again",
                   etcd_lease_, why));
  client_.stop_watches();
}

asio::awaitable<void> EtcdMembership::pause_until(std::chrono::nanoseconds when) {
  const auto left = when - now();
  if (left > std::chrono::nanoseconds::zero())
    co_await pause(std::chrono::duration_cast<milliseconds>(left));
}

asio::awaitable<void> EtcdMembership::pause(milliseconds how_long) {
  asio::steady_timer timer(io_, how_long);
  boost::system::error_code ec;
  co_await timer.async_wait(net::redirect(ec));
}

asio::awaitable<void> EtcdMembership::run() {
  while (!stopped_) {
    lost_ = false;
    following_ = false;
    map_confirmed_.reset();
    if (co_await open_session()) {
      co_await follow(session_);
    }
    const std::int64_t ended = etcd_lease_;
    ++session_;  // the session's keepalive loop stops
    fence_.lose();
    publish_fence();
    state_ = cluster::NodeState::kDown;
    etcd_lease_ = 0;
    if (stopped_) break;
    // The key may outlive a lease etcd still holds (a watch that broke, say): give it up, so
    // that registering again does not wait for it to expire.
    if (ended != 0) co_await client_.revoke(ended);
    // A lease etcd said was lost (expired, or its key deleted) is replaced at once: etcd
    // answers, and while this node is not registered, the primaries cannot merge the copies it
    // holds (issue 23). Only a failure to reach etcd waits before the next attempt.
    if (!lost_) co_await pause(config_.retry);
  }
}

asio::awaitable<bool> EtcdMembership::open_session() {
  const auto sent = now();
  const auto wall_sent = std::chrono::system_clock::now();
  const auto lease = co_await client_.grant(config_.ttl);
  if (!lease) {
    warn("cannot grant a lease: " + lease.error());
    co_return false;
  }
  if (stopped_) {
    co_await client_.revoke(lease->id);
    co_return false;
  }
  etcd_lease_ = lease->id;
  last_answered_ = wall_sent;
  fence_.on_answer(sent, std::chrono::seconds(lease->ttl_s));
  publish_fence();
  asio::co_spawn(io_, keepalive_loop(session_), asio::detached);
  // Register as joining, unless the key exists: a record of this node's previous run, whose
  // lease has not expired yet (a restart after kill -9 waits up to the TTL), or another node
  // with the same id, which keeps it for as long as it lives.
  const std::string joining = cluster::encode_member_value(
      {config_.node_id, config_.address, cluster::NodeState::kJoining}, config_.shard_ports);
  const auto waited_since = now();
  while (current(session_) && !lost_) {
    const auto put = co_await client_.put_if_absent(key_, joining, etcd_lease_);
    if (!put) {
      warn("cannot register " + key_ + ": " + put.error());
      co_return false;
    }
    if (put->written) {
      state_ = cluster::NodeState::kJoining;
      say(fmt::format("registered {} as joining under lease {:x} (TTL {} s)", key_, etcd_lease_,
                      lease->ttl_s));
      co_return true;
    }
    if (now() - waited_since > 2 * config_.ttl) {
      warn(fmt::format("{} is held by another live lease: is node id '{}' used twice?", key_,
                       config_.node_id));
    } else {
      say(fmt::format("{} is still held (a previous run's lease?): waiting for it to expire",
                      key_));
    }
    co_await pause(config_.retry);
  }
  co_return false;
}

asio::awaitable<void> EtcdMembership::keepalive_loop(std::uint64_t session) {
  const milliseconds interval =
      std::chrono::duration_cast<milliseconds>(config_.ttl) / 4;  // --lease-ttl / 4
  while (current(session) && !lost_) {
    const auto sent = now();
    const auto wall_sent = std::chrono::system_clock::now();
    const auto ttl = co_await client_.keepalive(etcd_lease_);
    if (!current(session)) break;
    note_member();
    if (!ttl) {
      // The fence closes by itself if this goes on; the lease may well still be alive.
      warn("keepalive failed: " + ttl.error());
    } else if (*ttl <= 0) {
      lose("etcd says it has expired");
      break;
    } else {
      last_answered_ = wall_sent;
      fence_.on_answer(sent, std::chrono::seconds(*ttl));
      publish_fence();
    }
    co_await pause_until(sent + interval);
  }
}

asio::awaitable<bool> EtcdMembership::write_state(cluster::NodeState state, std::uint64_t session) {
  const std::string value =
      cluster::encode_member_value({config_.node_id, config_.address, state}, config_.shard_ports);
  while (current(session) && !lost_) {
    const auto put = co_await client_.put(key_, value, etcd_lease_);
    if (put) {
      state_ = state;
      say(fmt::format("{} is {} (revision {})", key_, cluster::node_state_name(state), *put));
      co_return true;
    }
    warn(fmt::format("cannot set {} {}: {}", key_, cluster::node_state_name(state), put.error()));
    co_await pause(config_.retry);
  }
  co_return false;
}

EtcdMembership::Records EtcdMembership::records_of(const etcd::RangeResult& read) {
  Records records;
  for (const etcd::KeyValue& kv : read.kvs) records[kv.key] = Record{kv.value, kv.create_revision};
  return records;
}

bool EtcdMembership::adopt_members(std::int64_t revision) {
  std::vector<cluster::MemberEntry> entries;
  entries.reserve(members_.size());
  for (const auto& [key, record] : members_) {
    entries.push_back({key, record.value, record.created});
  }
  cluster::MembersView view =
      cluster::members_view(config_.cluster, entries, static_cast<std::uint64_t>(revision));
  for (const std::string& why : view.rejected) warn("member record left out: " + why);
  if (!view.map) {
    warn(fmt::format("the members at revision {} make no map: {}", revision, view.map.error()));
    return false;
  }
  adopt_(*view.map);
  adopted_ = members_;
  return true;
}

asio::awaitable<void> EtcdMembership::confirm_loop(std::uint64_t session) {
  const milliseconds interval = std::chrono::duration_cast<milliseconds>(config_.ttl) / 4;
  const std::string prefix = cluster::members_prefix(config_.cluster);
  while (current(session) && !lost_) {
    const auto sent = now();
    const auto read = co_await client_.range(prefix, /*prefix=*/true);
    if (!current(session) || lost_) break;
    note_member();
    if (!read) {
      warn("cannot confirm the member set: " + read.error());
    } else {
      confirm(*read, sent);
    }
    co_await pause_until(sent + interval);
  }
}

void EtcdMembership::confirm(const etcd::RangeResult& read, std::chrono::nanoseconds sent) {
  Records set = records_of(read);
  const cluster::MemberRead verdict =
      cluster::judge_member_read(set == adopted_, read.revision, watched_, members_ == adopted_);
  if (verdict == cluster::MemberRead::kConfirms) {
    map_confirmed_.on_confirmed(sent);
    publish_fence();
    return;
  }
  if (verdict == cluster::MemberRead::kNothing) return;
  // etcd has a member set the watch never brought: it sits on a member that froze or fell
  // behind. The read's set is adopted, and the watch made again on another member.
  say(
      fmt::format("the watch on {} missed revision {} (it had {}): map taken from a read, "
                  "watch remade on another member",
                  client_.watch_endpoint().empty() ? std::string("(none open)")
                                                   : std::string(client_.watch_endpoint()),
                  read.revision, watched_));
  members_ = std::move(set);
  watched_ = read.revision;
  client_.leave_watch_endpoint();
  client_.stop_watches();
  if (members_.find(key_) == members_.end()) {
    lose("its key is gone");
    return;
  }
  if (adopt_members(read.revision)) {
    map_confirmed_.on_confirmed(sent);
    publish_fence();
  }
}

asio::awaitable<void> EtcdMembership::follow(std::uint64_t session) {
  const std::string prefix = cluster::members_prefix(config_.cluster);
  bool reload = true;
  bool registered = false;
  bool warmed = false;
  while (current(session) && !lost_) {
    if (reload) {
      // The whole member set at one revision: at the start, after the warm-up (which did not
      // follow the watch: the hand-over at `active` must be planned from the map just before
      // it), and when the watch's start was compacted away (the events between are gone; the
      // set is not).
      const auto sent = now();
      const auto read = co_await client_.range(prefix, /*prefix=*/true);
      if (!current(session) || lost_) break;
      if (!read) {
        warn("cannot read " + prefix + ": " + read.error());
        co_await pause(config_.retry);
        continue;
      }
      reload = false;
      // confirm_loop() may have adopted a newer read meanwhile.
      if (read->revision < watched_) continue;
      members_ = records_of(*read);
      watched_ = read->revision;
      if (members_.find(key_) == members_.end()) {
        lose("its key is gone");
        break;
      }
      if (adopt_members(read->revision)) {
        map_confirmed_.on_confirmed(sent);
        publish_fence();
      }
    }
    if (!registered) {
      // In the map as joining (so clients and peers know the address), the node fetches what
      // it will own while the primaries stream their changes to it, reads the member set
      // again, then turns active: the map of that revision puts it in the ring, and the
      // hand-over pulls what changed since.
      if (!draining_ && !warmed) {
        co_await warm(session);
        warmed = true;
        reload = true;
        continue;
      }
      if (!co_await write_state(
              draining_ ? cluster::NodeState::kDraining : cluster::NodeState::kActive, session)) {
        break;
      }
      registered = true;
      // A drain asked for while `active` was being written.
      if (draining_ && state_ != cluster::NodeState::kDraining &&
          !co_await write_state(cluster::NodeState::kDraining, session)) {
        break;
      }
    }
    if (!following_) {
      // Registered: from here on, reads confirm the map (or correct it) beside the watch.
      following_ = true;
      asio::co_spawn(io_, confirm_loop(session), asio::detached);
    }
    const std::int64_t from = watched_;
    const std::string why =
        co_await client_.watch(prefix, from + 1, [&](const etcd::WatchBatch& batch) {
          if (!current(session) || lost_) return false;
          if (batch.canceled) {
            reload = batch.compact_revision > 0;
            return false;
          }
          if (batch.events.empty()) return true;
          // Each revision is adopted in turn (a message after a slow read may hold several):
          // the hand-over of each map is planned from the one before it. A failover is one
          // revision.
          for (std::size_t i = 0; i < batch.events.size(); ++i) {
            const etcd::WatchEvent& event = batch.events[i];
            // Already in members_ by a read that confirm() adopted meanwhile.
            if (event.kv.mod_revision <= from || event.kv.mod_revision < watched_) continue;
            if (event.type == etcd::WatchEvent::Type::kPut) {
              members_[event.kv.key] = Record{event.kv.value, event.kv.create_revision};
            } else {
              members_.erase(event.kv.key);
              if (event.kv.key == key_) lose("its key was deleted");
            }
            watched_ = std::max(watched_, event.kv.mod_revision);
            const bool last_of_revision =
                i + 1 == batch.events.size() || batch.events[i + 1].kv.mod_revision != watched_;
            if (lost_ || !last_of_revision) continue;
            adopt_members(watched_);
          }
          return !lost_;
        });
    if (!current(session) || lost_) break;
    if (!why.empty() && why != "stopped") {
      warn("watch of " + prefix + " ended: " + why);
      co_await pause(config_.retry);
    }
  }
}

asio::awaitable<void> EtcdMembership::warm(std::uint64_t session) {
  if (!warm_up_) co_return;
  struct Wait {
    explicit Wait(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;
    bool done = false;
    std::size_t records = 0;
  };
  // Shared with the callback, which may come after a timeout has moved this coroutine on.
  auto wait = std::make_shared<Wait>(io_);
  wait->timer.expires_after(config_.warm_up_timeout);
  const auto started = now();
  warm_up_([wait](std::size_t records) {
    wait->done = true;
    wait->records = records;
    wait->timer.cancel();
  });
  if (!wait->done) {
    cancel_warm_ = [wait] { wait->timer.cancel(); };
    boost::system::error_code ec;
    co_await wait->timer.async_wait(net::redirect(ec));
    cancel_warm_ = nullptr;
  }
  if (!current(session)) co_return;
  const auto took = std::chrono::duration_cast<milliseconds>(now() - started).count();
  if (wait->done) {
    say(fmt::format("joining: fetched {} records of the partitions it will own in {} ms",
                    wait->records, took));
  } else {
    say(fmt::format("joining: the warm-up took over {} ms; turning active all the same", took));
  }
}

std::string EtcdMembership::drain() {
  if (stopped_) return "the node is shutting down";
  if (draining_) return "";
  draining_ = true;
  if (cancel_warm_) cancel_warm_();  // a draining node takes no partitions
  // A session still registering writes `draining` instead of `active` by itself.
  if (state_ == cluster::NodeState::kActive) {
    asio::co_spawn(
        io_,
        [this, session = session_]() -> asio::awaitable<void> {
          co_await write_state(cluster::NodeState::kDraining, session);
        },
        asio::detached);
  }
  say("draining: this node's ranges move to the others; stop it once they have");
  return "";
}

void EtcdMembership::stop(std::function<void()> done) {
  stopped_ = true;
  if (cancel_warm_) cancel_warm_();
  fence_.lose();
  publish_fence();
  fence_timer_.cancel();
  client_.stop_watches();
  const std::int64_t lease = std::exchange(etcd_lease_, 0);
  if (lease == 0) {
    done();
    return;
  }
  asio::co_spawn(
      io_,
      [this, lease, done = std::move(done)]() -> asio::awaitable<void> {
        const auto revoked = co_await client_.revoke(lease);
        if (!revoked) warn("cannot revoke lease at stop: " + revoked.error());
        done();
      },
      asio::detached);
}

}  // namespace sluice::server
