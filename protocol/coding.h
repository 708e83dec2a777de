// Little-endian fixed-width integers, written and read one byte at a time with shifts, so the
// wire format does not depend on the host's byte order, alignment or struct layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace sluice::protocol {

// REQUIRES: dst has room for the value being written.
inline void encode_fixed16(std::uint8_t* dst, std::uint16_t value) {
  dst[0] = static_cast<std::uint8_t>(value);
  dst[1] = static_cast<std::uint8_t>(value >> 8);
}

inline void encode_fixed32(std::uint8_t* dst, std::uint32_t value) {
  dst[0] = static_cast<std::uint8_t>(value);
  dst[1] = static_cast<std::uint8_t>(value >> 8);
  dst[2] = static_cast<std::uint8_t>(value >> 16);
  dst[3] = static_cast<std::uint8_t>(value >> 24);
}

inline void encode_fixed64(std::uint8_t* dst, std::uint64_t value) {
  encode_fixed32(dst, static_cast<std::uint32_t>(value));
  encode_fixed32(dst + 4, static_cast<std::uint32_t>(value >> 32));
}

// REQUIRES: src holds at least as many bytes as the value being read.
inline std::uint16_t decode_fixed16(const std::uint8_t* src) {
  return static_cast<std::uint16_t>(src[0] | (src[1] << 8));
}

inline std::uint32_t decode_fixed32(const std::uint8_t* src) {
  return static_cast<std::uint32_t>(src[0]) | (static_cast<std::uint32_t>(src[1]) << 8) |
         (static_cast<std::uint32_t>(src[2]) << 16) | (static_cast<std::uint32_t>(src[3]) << 24);
}

inline std::uint64_t decode_fixed64(const std::uint8_t* src) {
  return static_cast<std::uint64_t>(decode_fixed32(src)) |
         (static_cast<std::uint64_t>(decode_fixed32(src + 4)) << 32);
}

// A bounds-checked cursor over a body. Every read either succeeds whole or returns false and
// leaves the cursor where it was, so a parser never reads past the span it was given.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> data) : data_(data) {}

  std::size_t remaining() const { return data_.size() - pos_; }
  bool at_end() const { return pos_ == data_.size(); }

  bool read_u8(std::uint8_t& value) {
    if (remaining() < 1) return false;
    value = data_[pos_];
    pos_ += 1;
    return true;
  }
  bool read_u16(std::uint16_t& value) {
    if (remaining() < 2) return false;
    value = decode_fixed16(data_.data() + pos_);
    pos_ += 2;
    return true;
  }
  bool read_u32(std::uint32_t& value) {
    if (remaining() < 4) return false;
    value = decode_fixed32(data_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool read_u64(std::uint64_t& value) {
    if (remaining() < 8) return false;
    value = decode_fixed64(data_.data() + pos_);
    pos_ += 8;
    return true;
  }
  // A view of the next `size` bytes; it points into the reader's span.
  bool read_bytes(std::size_t size, std::span<const std::uint8_t>& value) {
    if (remaining() < size) return false;
    value = data_.subspan(pos_, size);
    pos_ += size;
    return true;
  }
  // A view of the next `size` bytes as text; it points into the reader's span.
  bool read_string(std::size_t size, std::string_view& value) {
    if (remaining() < size) return false;
    value = std::string_view(reinterpret_cast<const char*>(data_.data() + pos_), size);
    pos_ += size;
    return true;
  }

 private:
  std::span<const std::uint8_t> data_;
  std::size_t pos_ = 0;
};

}  // namespace sluice::protocol
