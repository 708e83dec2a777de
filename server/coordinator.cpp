#include "server/coordinator.h"
#include "log/log.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <algorithm>
#include <iterator>
#include <map>
#include <random>

#include "cluster/node.h"
#include "protocol/cluster_messages.h"
#include "server/cluster_view.h"
#include "server/dispatcher.h"
#include "server/peer_link.h"
#include "server/shard.h"
#include "server/shard_counters.h"

namespace sluice::server {

namespace asio = boost::asio;

namespace {

constexpr std::uint16_t kPullPageRecords = 512;
// A gathering pull asks a source that answered with an error again after this long.
constexpr std::chrono::milliseconds kAskAgainAfter{200};
// A pull since a warm-up asks from this long before the warm-up's clock: the source's clock is
// the wall clock (its records' stamps are on it), and a step back of up to this much between the
// warm-up and the pull must not hide a change made after the warm-up read the record.
constexpr std::uint64_t kSinceMarginNs = 1'000'000'000;

const std::string* node_id(const cluster::Ring& ring, cluster::NodeIndex index) {
  return index == cluster::kNoNode ? nullptr : &ring.nodes()[index];
}

}  // namespace

std::vector<PullPlan> plan_pulls(const cluster::ClusterMap* from, const cluster::ClusterMap& to,
                                 const std::string& self,
                                 const std::vector<PullPlan::Source>& absent) {
  const cluster::Ring& ring = to.ring();
  const std::optional<cluster::NodeIndex> me = ring.find(self);
  if (!me) return {};
  const auto source = [&](const std::string* id, bool fence) -> std::optional<PullPlan::Source> {
    if (id == nullptr || *id == self) return std::nullopt;
    const cluster::ClusterNode* node = to.find(*id);
    if (node == nullptr) return std::nullopt;  // gone from the map: nobody to ask
    return PullPlan::Source{*id, node->address, fence};
  };
  // Partitions with the same sources share one plan (one pull per source node).
  std::map<std::string, PullPlan> plans;
  const auto add = [&](std::uint32_t partition, bool primary,
                       std::vector<PullPlan::Source> sources) {
    std::string key = primary ? "p" : "r";
    for (const PullPlan::Source& s : sources)
      key += fmt::format("|{}{}", s.node, s.fence ? "!" : "");
    PullPlan& plan = plans[key];
    plan.primary = primary;
    plan.sources = std::move(sources);
    plan.partitions.push_back(partition);
  };
  const cluster::Ring* old = from != nullptr ? &from->ring() : nullptr;
  // Every other member, and those `from` did not have, in the order of `to`.
  std::vector<PullPlan::Source> others;
  std::vector<PullPlan::Source> newcomers;
  if (from != nullptr) {
    for (const cluster::ClusterNode& node : to.nodes()) {
      if (node.id == self || node.state == cluster::NodeState::kDown) continue;
      others.push_back({node.id, node.address, true});
      if (from->find(node.id) == nullptr) newcomers.push_back({node.id, node.address, false});
    }
    for (const PullPlan::Source& node : absent) {
      if (node.node == self || to.find(node.node) != nullptr) continue;
      others.push_back({node.node, node.address, true});
    }
  }
  const auto add_gathered = [&](std::uint32_t partition, std::vector<PullPlan::Source> sources,
                                bool serving) {
    if (sources.empty()) return;
    std::string key = serving ? "s" : "g";
    for (const PullPlan::Source& s : sources) key += "|" + s.node;
    PullPlan& plan = plans[key];
    plan.primary = true;
    plan.gather = true;
    plan.serving = serving;
    plan.sources = std::move(sources);
    plan.partitions.push_back(partition);
  };
  for (std::uint32_t p = 0; p < ring.partition_count(); ++p) {
    const cluster::PartitionOwners& now = ring.owners(p);
    const bool primary = now.primary == *me;
    const bool replica = now.replica == *me;
    if (!primary && !replica) continue;
    std::vector<PullPlan::Source> sources;
    if (old == nullptr) {
      // Start-up: the other holder of the partition has what this node had before it stopped
      // (in static mode nobody served its keys meanwhile). For a partition this node is to be
      // primary of, it is fenced too: a node that joins takes partitions whose old primary is
      // (by the ring) their replica now, and that node may still serve them until it rereads
      // the file.
      const std::string* other = node_id(ring, primary ? now.replica : now.primary);
      if (auto s = source(other, primary)) sources.push_back(*s);
      if (primary || !sources.empty()) add(p, primary, std::move(sources));
      continue;
    }
    const cluster::PartitionOwners before =
        p < old->partition_count() ? old->owners(p) : cluster::PartitionOwners{};
    const std::string* old_primary = node_id(*old, before.primary);
    const std::string* old_replica = node_id(*old, before.replica);
    const bool was_primary = old_primary != nullptr && *old_primary == self;
    const bool was_replica = old_replica != nullptr && *old_replica == self;
    if (primary && before.primary == cluster::kNoNode) {
      // Nobody was active: whoever holds the partition is a member again (joining, most
      // likely) or not back yet. Ask every member; none answering, serve what is here.
      if (others.empty()) {
        add(p, true, {});
      } else {
        add_gathered(p, others, false);
      }
    } else if (primary && !was_primary) {
      // The old primary has the newest counts and may still serve them: fence it and pull. If
      // it is gone, the replica's copy is the best there is (this node's own, if it was it).
      if (auto s = source(old_primary, true)) sources.push_back(*s);
      if (!was_replica) {
        if (auto s = source(old_replica, false)) sources.push_back(*s);
      }
      add(p, true, std::move(sources));
    } else if (primary && !newcomers.empty()) {
      add_gathered(p, newcomers, true);
    } else if (replica && !was_replica && !was_primary) {
      if (auto s = source(node_id(ring, now.primary), false)) {
        sources.push_back(*s);
        add(p, false, std::move(sources));
      }
    }
  }
  // A PULL names at most 65,535 partitions (docs/PROTOCOL.md 10.5): a node that is primary of
  // every partition (the first active after every lease expired) pulls them in two requests.
  std::vector<PullPlan> out;
  out.reserve(plans.size());
  for (auto& [key, plan] : plans) {
    while (plan.partitions.size() > kMaxPullPartitions) {
      PullPlan part = plan;
      part.partitions.assign(plan.partitions.end() - kMaxPullPartitions, plan.partitions.end());
      plan.partitions.resize(plan.partitions.size() - kMaxPullPartitions);
      out.push_back(std::move(part));
    }
    out.push_back(std::move(plan));
  }
  return out;
}

// One plan: the sources in turn, every shard of the current source page by page.
class PullJob : public std::enable_shared_from_this<PullJob> {
 public:
  // `done` (may be empty) is called with the number of records pulled once they are merged.
  PullJob(Coordinator& owner, std::shared_ptr<const ClusterView> view, PullPlan plan,
          std::function<void(std::size_t)> done = {})
      : owner_(owner),
        view_(std::move(view)),
        plan_(std::move(plan)),
        done_(std::move(done)),
        timer_(owner.io_),
        retry_timer_(owner.io_),
        started_(std::chrono::steady_clock::now()) {
    request_.max_records = kPullPageRecords;
    request_.partitions.assign(plan_.partitions.begin(), plan_.partitions.end());
  }

  void start() { next_source(); }

  void stop() {
    stopped_ = true;
    close_links();
    timer_.cancel();
    retry_timer_.cancel();
  }

 private:
  struct ShardPull {
    std::shared_ptr<PeerLink> link;
    std::uint64_t cursor = 0;
    bool done = false;
    bool asked = false;
  };

  ServerContext& context() { return owner_.context_; }

  void close_links() {
    if (control_) control_->close();
    control_.reset();
    for (ShardPull& s : shards_) {
      if (s.link) s.link->close();
    }
    shards_.clear();
  }

  PeerLink::Config link_config(const std::string& host, std::uint16_t port) {
    PeerLink::Config config;
    config.host = host;
    config.port = port;
    config.source = context().config.source_address;
    config.token = context().config.auth_token;
    config.name = std::string(kNodeClientPrefix) + context().node_id;
    config.epoch = view_->epoch();
    return config;
  }

  void next_source() {
    close_links();
    if (stopped_) return;
    if (source_index_ >= plan_.sources.size()) return finish(!answered_.empty());
    const PullPlan::Source& source = plan_.sources[source_index_++];
    const auto address = cluster::parse_node_address(source.address);
    if (!address) return next_source();
    host_ = address->host;
    request_.fence = source.fence;
    request_.cursor = 0;
    // A warm-up asks for everything with the source's clock (since 0); a plan with since_ns asks
    // its first source for what changed since. The clock kept is the earliest of the pages'.
    since_ = plan_.warm ? std::optional<std::uint64_t>(0)
                        : (source_index_ == 1 ? plan_.since_ns : std::nullopt);
    clock_.reset();
    clock_complete_ = true;
    since_used_ = false;
    fenced_source_ = false;
    connect(*address);
    arm_progress_timer();
  }

  // Opens the control link to the current source; its HELLO opens the shards' links.
  void connect(const cluster::NodeAddress& address) {
    auto self = shared_from_this();
    control_ = std::make_shared<PeerLink>(
        owner_.io_, link_config(address.host, address.port), [](const protocol::Frame&) {},
        [self](bool up, const std::string& why) {
          if (up) {
            self->open_shards();
          } else {
            self->last_error_ = why;
          }
        });
    control_->start();
  }

  // A gathering pull asks a source that answered with an error again (it may not have adopted
  // the map that lists this node yet), until the progress timer gives it up.
  void ask_again() {
    close_links();
    retry_timer_.expires_after(kAskAgainAfter);
    auto self = shared_from_this();
    const std::size_t attempt = source_index_;
    retry_timer_.async_wait([self, attempt](const boost::system::error_code& ec) {
      if (ec || self->stopped_ || self->finished_ || attempt != self->source_index_) return;
      const auto address = cluster::parse_node_address(self->plan_.sources[attempt - 1].address);
      if (address) self->connect(*address);
    });
  }

  void open_shards() {
    if (stopped_ || control_ == nullptr || !shards_.empty()) return;
    const std::vector<std::uint16_t> ports = control_->hello().shard_ports;
    shards_.resize(ports.size());
    auto self = shared_from_this();
    for (std::size_t j = 0; j < ports.size(); ++j) {
      shards_[j].link = std::make_shared<PeerLink>(
          owner_.io_, link_config(host_, ports[j]),
          [self, j](const protocol::Frame& frame) { self->on_page(j, frame); },
          [self, j](bool up, const std::string& why) {
            if (up) {
              self->ask(j);
            } else {
              self->last_error_ = why;
            }
          });
      shards_[j].link->start();
    }
  }

  void ask(std::size_t j) {
    ShardPull& s = shards_[j];
    if (stopped_ || s.done || s.link == nullptr || !s.link->up()) return;
    protocol::PullRequest request = request_;
    request.cursor = s.cursor;
    if (since_ && s.link->hello().version >= protocol::kFirstPullSinceVersion) {
      request.since_ns = since_;
      since_used_ = since_used_ || *since_ != 0;
    } else {
      clock_complete_ = false;  // an older source: every record, and no clock
    }
    protocol::encode_pull_request(s.link->output(), s.link->next_id(), request, s.link->framing());
    s.link->flush();
    s.asked = true;
  }

  void on_page(std::size_t j, const protocol::Frame& frame) {
    if (stopped_ || j >= shards_.size()) return;
    ShardPull& s = shards_[j];
    protocol::PullReplyHeader header;
    if (frame.header.opcode != protocol::Opcode::kPull ||
        !protocol::parse_pull_reply(frame.body, header, records_)) {
      last_error_ = frame.header.opcode == protocol::Opcode::kError ? "an error reply"
                                                                    : "a malformed PULL reply";
      return plan_.gather ? ask_again() : leave_source();
    }
    arm_progress_timer();
    fenced_source_ = fenced_source_ || header.fenced;
    if (header.now_ns) {
      clock_ = std::min(clock_.value_or(*header.now_ns), *header.now_ns);
    } else {
      clock_complete_ = false;
    }
    apply(records_);
    s.cursor = header.next_cursor;
    if (header.done) {
      s.done = true;
      maybe_finish();
    } else {
      ask(j);
    }
  }

  // Keeps the page's records for the shards that own them here, until the pull ends.
  void apply(const std::vector<protocol::WireRecord>& records) {
    const unsigned shards = context().shard_count;
    held_.resize(shards);
    pulled_ += records.size();
    for (const protocol::WireRecord& record : records) {
      Owned owned{record, {}};
      owned.record.log_bytes = {};
      for (std::uint32_t i = 0; i < record.log_count; ++i) owned.log.push_back(record.log_at(i));
      held_[shard_for(KeyHash{record.fp_lo, record.fp_hi}, shards)].push_back(std::move(owned));
    }
  }

  // Hands every record pulled to the shard that owns it here, in a random order, a chunk per
  // post; complete() once all are merged. A source's pages come in its table's order, which is
  // hash order: merged as they come, each page's keys would crowd a narrow band of this table's
  // slots (a segment grows by its overall load, not a band's), and the table would evict
  // records to place them (the 20-kill failover loop saw one node evict 17 of its own keys
  // that way, and a table test 971 of 5,000 pulled into an empty table).
  void flush() {
    auto self = shared_from_this();
    std::mt19937_64 random(plan_.partitions.empty() ? 1 : plan_.partitions.front() + held_.size());
    constexpr std::size_t kChunk = 2048;
    for (std::size_t i = 0; i < held_.size(); ++i) {
      std::vector<Owned>& all = held_[i];
      std::shuffle(all.begin(), all.end(), random);
      Shard* shard = context().shards[i].get();
      for (std::size_t at = 0; at < all.size(); at += kChunk) {
        const std::size_t end = std::min(all.size(), at + kChunk);
        std::vector<Owned> chunk(
            std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(at)),
            std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(end)));
        ++applying_;
        asio::post(shard->io(), [self, shard, serving = plan_.serving, chunk = std::move(chunk)]() {
          const std::uint64_t now_ns = shard->context().clock->now_ns();
          for (const Owned& owned : chunk) {
            shard->engine().apply_record(owned.record, owned.log, now_ns, serving);
          }
          shard->engine().counters()[ShardStat::kPulledRecords].add(chunk.size());
          asio::post(self->owner_.io_, [self] {
            if (--self->applying_ == 0) self->complete();
          });
        });
      }
    }
    held_.clear();
    if (applying_ == 0) complete();
  }

  void maybe_finish() {
    if (stopped_ || finished_ || shards_.empty()) return;
    for (const ShardPull& s : shards_) {
      if (!s.done) return;
    }
    if (plan_.gather) {
      answered_.push_back(plan_.sources[source_index_ - 1].node);
      if (source_index_ < plan_.sources.size()) return next_source();
    }
    finish(true);
  }

  void arm_progress_timer() {
    timer_.expires_after(Coordinator::kSourceTimeout);
    auto self = shared_from_this();
    const std::size_t attempt = source_index_;
    timer_.async_wait([self, attempt](const boost::system::error_code& ec) {
      if (ec || self->stopped_ || self->finished_ || attempt != self->source_index_) return;
      const PullPlan::Source& gone = self->plan_.sources[attempt - 1];
      log::warning(
          "cluster",
          fmt::format("pull of {} partitions from {}: no progress in {} ms ({}); {}",
                      self->plan_.partitions.size(), gone.node, Coordinator::kSourceTimeout.count(),
                      self->last_error_.empty() ? "no answer" : self->last_error_,
                      attempt < self->plan_.sources.size() ? "trying the next source"
                                                           : "serving with the records here"));
      self->leave_source();
    });
  }

  // The current source will not give the partitions: the next one, after the wait below when
  // this one was to be fenced and never was.
  void leave_source() {
    const PullPlan::Source& gone = plan_.sources[source_index_ - 1];
    if (gone.fence && !fenced_source_) return after_unfenced_wait();
    next_source();
  }

  // The source that was to be fenced never answered a page: it may still decide these partitions
  // until it learns the new map or its fence closes, which happens by the start of this
  // hand-over (after the change in etcd) plus the lease TTL less the margin
  // (cluster::MapConfirmation). In etcd mode nothing here is pulled unfenced or served before
  // TTL + margin from that start; static mode has no lease to wait for.
  void after_unfenced_wait() {
    const ServerConfig& config = context().config;
    const auto not_before = started_ + config.etcd_lease_ttl + config.fence_margin;
    const auto now = std::chrono::steady_clock::now();
    if (!context().fenced || now >= not_before) return next_source();
    log::info("cluster",
              fmt::format(
                  "pull of {} partitions: waiting {} ms more, until the unfenced "
                  "source's lease must have lapsed",
                  plan_.partitions.size(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(not_before - now).count()));
    timer_.expires_at(not_before);
    auto self = shared_from_this();
    const std::size_t attempt = source_index_;
    timer_.async_wait([self, attempt](const boost::system::error_code& ec) {
      if (ec || self->stopped_ || self->finished_ || attempt != self->source_index_) return;
      self->next_source();
    });
  }

  // The pull is over (all pages in, or no source left): the records got so far are merged, then
  // the partitions are served.
  void finish(bool pulled) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    retry_timer_.cancel();
    close_links();
    if (pulled && plan_.gather) {
      for (const std::string& node : answered_) from_ += (from_.empty() ? "" : ", ") + node;
    } else if (pulled) {
      from_ = plan_.sources[source_index_ - 1].node;
      // Every page of every shard came with the source's clock: the warm copy is what the
      // source held at the earliest of them, and a pull since then brings the rest.
      if (plan_.warm && clock_ && clock_complete_) {
        owner_.warmed(from_, *clock_, plan_.partitions, view_->map.ring().partition_count());
      }
    }
    flush();
  }

  void complete() {
    if (stopped_) return;
    if (plan_.primary && !plan_.warm && !plan_.serving) {
      for (const std::uint32_t p : plan_.partitions) {
        view_->states->serve_pulled(p, view_->epoch());
      }
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started_);
    const char* kind = plan_.warm      ? "warm-up while joining"
                       : since_used_   ? "only what changed since the warm-up"
                       : plan_.serving ? "a returning node's copies, merged while serving"
                       : plan_.gather  ? "from every member, none having been active"
                       : plan_.primary ? "to serve as primary"
                                       : "as replica";
    if (from_.empty()) {
      log::info("cluster",
                fmt::format("epoch {}: {} partitions ({}): {}, serving with what is "
                            "here",
                            view_->epoch(), plan_.partitions.size(), kind,
                            plan_.sources.empty() ? "no node to pull from" : "no source answered"));
    } else {
      log::info("cluster",
                fmt::format("epoch {}: pulled {} records of {} partitions from {} in {} ms ({}{})",
                            view_->epoch(), pulled_, plan_.partitions.size(), from_, took.count(),
                            kind, request_.fence ? ", fenced" : ""));
    }
    if (done_) done_(pulled_);
    owner_.finished(this);
  }

  Coordinator& owner_;
  std::shared_ptr<const ClusterView> view_;
  PullPlan plan_;
  std::function<void(std::size_t)> done_;
  protocol::PullRequest request_;
  asio::steady_timer timer_;
  asio::steady_timer retry_timer_;  // gather: ask_again()
  std::chrono::steady_clock::time_point started_;
  std::optional<std::uint64_t> since_;  // what to ask the current source for
  std::optional<std::uint64_t> clock_;  // the earliest clock in its pages
  bool clock_complete_ = true;          // every page so far came with one
  bool since_used_ = false;             // a page was asked for what changed since a warm-up
  bool fenced_source_ = false;          // the current source answered a fencing page
  std::size_t pulled_ = 0;              // records received
  std::string from_;                    // the source that gave every page (gather: each)
  std::vector<std::string> answered_;   // gather: the sources that gave every page
  std::shared_ptr<PeerLink> control_;
  std::vector<ShardPull> shards_;
  struct Owned {
    protocol::WireRecord record;
    std::vector<std::uint64_t> log;
  };
  std::vector<protocol::WireRecord> records_;
  std::vector<std::vector<Owned>> held_;  // by local shard: every record pulled so far
  std::string host_;
  std::string last_error_;
  std::size_t source_index_ = 0;
  std::size_t applying_ = 0;
  bool stopped_ = false;
  bool finished_ = false;
};

Coordinator::Coordinator(ServerContext& context)
    : context_(context),
      io_(1),
      work_(asio::make_work_guard(io_)),
      thread_([this] { io_.run(); }) {}

Coordinator::~Coordinator() { stop(); }

void Coordinator::start(std::shared_ptr<const ClusterView> view, std::vector<PullPlan> plans) {
  if (stopped_.load()) return;
  running_.fetch_add(plans.size());
  asio::post(io_, [this, view = std::move(view), plans = std::move(plans)]() mutable {
    std::vector<PullPlan> split;
    for (PullPlan& plan : plans) use_warm_copies(plan, split);
    running_.fetch_add(split.size() - plans.size());  // a split plan is two pulls
    // In the ring now: the warm-up's copies were for this hand-over; what it did not use is
    // not kept for a later one.
    if (view->self != cluster::kNoNode) warm_.clear();
    for (PullPlan& plan : split) {
      auto job = std::make_shared<PullJob>(*this, view, std::move(plan));
      jobs_.push_back(job);
      job->start();
    }
  });
}

void Coordinator::warm_up(std::shared_ptr<const ClusterView> view, std::vector<PullPlan> plans,
                          std::function<void(std::size_t)> done) {
  if (stopped_.load()) return;
  running_.fetch_add(plans.size());
  asio::post(io_, [this, view = std::move(view), plans = std::move(plans),
                   done = std::move(done)]() mutable {
    // A new warm-up (a new session of the node) starts from nothing.
    warm_.clear();
    if (plans.empty()) {
      done(0);
      return;
    }
    struct Group {
      std::size_t left = 0;
      std::size_t records = 0;
      std::function<void(std::size_t)> done;
    };
    auto group = std::make_shared<Group>(Group{plans.size(), 0, std::move(done)});
    for (PullPlan& plan : plans) {
      plan.warm = true;
      plan.since_ns.reset();
      for (PullPlan::Source& source : plan.sources) source.fence = false;
      auto job =
          std::make_shared<PullJob>(*this, view, std::move(plan), [group](std::size_t records) {
            group->records += records;
            if (--group->left == 0) group->done(group->records);
          });
      jobs_.push_back(job);
      job->start();
    }
  });
}

void Coordinator::warmed(const std::string& source, std::uint64_t since_ns,
                         const std::vector<std::uint32_t>& partitions, std::uint32_t count) {
  since_ns = since_ns > kSinceMarginNs ? since_ns - kSinceMarginNs : 0;
  WarmCopy& copy = warm_[source];
  // Several warm plans may read one source: the copy holds from the earliest of them.
  copy.since_ns = copy.partitions.empty() ? since_ns : std::min(copy.since_ns, since_ns);
  copy.partitions.resize(count, false);
  for (const std::uint32_t p : partitions) {
    if (p < count) copy.partitions[p] = true;
  }
}

void Coordinator::use_warm_copies(PullPlan& plan, std::vector<PullPlan>& out) {
  const auto copy = plan.warm || plan.gather || plan.sources.empty()
                        ? warm_.end()
                        : warm_.find(plan.sources.front().node);
  if (copy == warm_.end()) {
    out.push_back(std::move(plan));
    return;
  }
  PullPlan covered = plan;
  covered.partitions.clear();
  covered.since_ns = copy->second.since_ns;
  std::vector<std::uint32_t> rest;
  for (const std::uint32_t p : plan.partitions) {
    if (p < copy->second.partitions.size() && copy->second.partitions[p]) {
      covered.partitions.push_back(p);
      copy->second.partitions[p] = false;  // the records move on from here: one use
    } else {
      rest.push_back(p);
    }
  }
  if (!covered.partitions.empty()) out.push_back(std::move(covered));
  if (!rest.empty()) {
    plan.partitions = std::move(rest);
    out.push_back(std::move(plan));
  }
}

bool Coordinator::run(std::function<void()> work) {
  if (stopped_.load()) return false;
  asio::post(io_, std::move(work));  // runs even if stop() comes next: io_ drains its queue
  return true;
}

void Coordinator::finished(PullJob* job) {
  std::erase_if(jobs_, [job](const std::shared_ptr<PullJob>& j) { return j.get() == job; });
  running_.fetch_sub(1);
}

void Coordinator::stop() {
  if (stopped_.exchange(true)) return;
  asio::post(io_, [this] {
    for (auto& job : jobs_) job->stop();
    jobs_.clear();
    work_.reset();
  });
  if (thread_.joinable()) thread_.join();
}

}  // namespace sluice::server
