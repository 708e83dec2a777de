// A node's shards without sockets or threads, and a peer that talks to them in memory: the
// dispatcher's tests and the connection fuzz target (tests/fuzz/connection_fuzz.cpp) feed it
// bytes and read its replies. The caller's thread runs every shard's event loop
// (run_until_idle()), so hand-overs between shards happen deterministically.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/dispatcher.h"
#include "server/peer.h"
#include "server/server.h"
#include "server/shard.h"

namespace sluice::test {

class MemoryNode {
 public:
  MemoryNode(server::ServerConfig config, const Clock& clock) {
    context_.config = std::move(config);
    context_.clock = &clock;
    context_.shard_count = context_.config.shards == 0 ? 1 : context_.config.shards;
    context_.node_id = "memory-node";
    for (unsigned i = 0; i < context_.shard_count; ++i) {
      context_.shard_ports.push_back(static_cast<std::uint16_t>(40000 + i));
      context_.shards.push_back(std::make_unique<server::Shard>(context_, i));
    }
  }

  server::Shard& shard(unsigned i) { return *context_.shards.at(i); }
  unsigned shard_count() const { return context_.shard_count; }
  server::ServerContext& context() { return context_; }

  // Runs every shard's ready handlers until none is left (at most `max_rounds` rounds).
  // Returns whether it became idle.
  bool run_until_idle(int max_rounds = 10'000) {
    for (int round = 0; round < max_rounds; ++round) {
      std::size_t ran = 0;
      for (auto& shard : context_.shards) {
        ran += shard->io().poll();
        shard->io().restart();
      }
      if (ran == 0) return true;
    }
    return false;
  }

 private:
  server::ServerContext context_;
};

// A connection without a socket: bytes fed to it are dispatched as sluiced's connection would
// (the same Dispatcher::dispatch_frames), replies collect in output().
class MemoryPeer final : public server::Peer {
 public:
  MemoryPeer(server::Shard& shard, std::uint16_t this_shard)
      : Peer(this_shard), shard_(shard), decoder_(shard.context().config.max_frame) {}

  static std::shared_ptr<MemoryPeer> create(server::Shard& shard,
                                            std::uint16_t this_shard = protocol::kPublicPort) {
    return std::make_shared<MemoryPeer>(shard, this_shard);
  }

  // Appends bytes to the input and dispatches the complete frames (until stopped).
  void feed(std::span<const std::uint8_t> bytes) {
    if (failed_ || closed_) return;  // a rejected or closed connection reads nothing more
    input_.insert(input_.end(), bytes.begin(), bytes.end());
    dispatch();
  }
  void feed(const protocol::Bytes& bytes) { feed(std::span<const std::uint8_t>(bytes)); }
  // Dispatches what is left (after back-pressure let go).
  void dispatch() {
    if (failed_ || closed_) return;
    const server::DispatchResult result =
        shard_.dispatcher().dispatch_frames(*this, decoder_, input_);
    input_.erase(input_.begin(), input_.begin() + static_cast<std::ptrdiff_t>(result.consumed));
  }

  // Replies so far, in the order they were appended; take_output() hands them over.
  const protocol::Bytes& output() const { return output_; }
  protocol::Bytes take_output() { return std::exchange(output_, {}); }
  std::size_t input_left() const { return input_.size(); }
  bool failed() const { return failed_; }
  int frames_finished() const { return frames_finished_; }
  // Stops dispatching as a connection does when its output backs up.
  void set_paused(bool paused) { paused_ = paused; }
  // The client went away (SocketPeer::close()): nothing more is dispatched, and replies that
  // complete later are dropped. Hand-over tasks still out keep the peer alive until they are back.
  void close() { closed_ = true; }

  protocol::Bytes& reply_buffer() override { return output_; }
  bool wants_replies() const override { return !failed_ && !closed_; }
  void reject(std::uint32_t request_id, protocol::WireErrorCode code,
              std::string_view message) override {
    if (failed_) return;
    failed_ = true;
    protocol::encode_error(output_, request_id, code, message);
  }
  void frame_finished() override { ++frames_finished_; }
  bool stop_dispatching() const override {
    return failed_ || closed_ || paused_ ||
           server::Dispatcher::backlog_full(*this, shard_.context().config);
  }

 private:
  server::Shard& shard_;
  const protocol::FrameDecoder decoder_;
  protocol::Bytes input_;
  protocol::Bytes output_;
  bool failed_ = false;
  bool closed_ = false;
  bool paused_ = false;
  int frames_finished_ = 0;
};

// Splits replies into frames; fails (returns false) on anything a client would refuse.
inline bool split_replies(std::span<const std::uint8_t> bytes,
                          std::vector<protocol::Frame>& frames) {
  const protocol::FrameDecoder decoder(std::numeric_limits<std::uint32_t>::max());
  frames.clear();
  std::size_t at = 0;
  while (at < bytes.size()) {
    const protocol::DecodeResult decoded = decoder.decode(bytes.subspan(at));
    if (decoded.status != protocol::DecodeStatus::kOk || !decoded.frame.header.is_reply()) {
      return false;
    }
    frames.push_back(decoded.frame);
    at += decoded.frame_size;
  }
  return true;
}

}  // namespace sluice::test
