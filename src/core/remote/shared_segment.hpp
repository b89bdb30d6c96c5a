// SharedSegment: the shared memory of one connection to a worker on this machine (wire version 4,
// docs/remote-protocol.md "Shared memory"): a memfd mapped here, offered to the server in a Segment frame
// (which maps it as /proc/<pid>/fd/<fd>), and an allocator of the regions requests take in it. Private to
// flowline::core's remote room (RemoteHost makes one per connection; tests use it directly).
//
// Layout: the first kSharedAlign bytes are the header, whose first 16 bytes are a random token the server
// checks; regions follow, each a multiple of kSharedAlign and aligned to it.
//
// Ownership and threads. RemoteHost holds the segment of its current connection through a shared_ptr and
// each call in flight holds one too, so a segment outlives its connection until the last call that used it
// has decoded its answer; a new connection (a worker restarted) gets a new segment, never the old one, so a
// region an old server may still write to is never handed out again. allocate() and release() are
// thread-safe (replica threads encode and decode concurrently); a Region releases itself when destroyed.
#pragma once

#include "wire.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace flowline::remote {

class SharedSegment : public std::enable_shared_from_this<SharedSegment> {
 public:
  // A memfd of `bytes` (at least two alignment units), mapped read-write, its token written. Throws
  // std::runtime_error saying why not (memfd_create, ftruncate or mmap failed).
  static std::shared_ptr<SharedSegment> create(std::size_t bytes);
  ~SharedSegment();  // unmaps and closes the memfd (the server's mapping, if any, stays its own)
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  // A part of the segment a request holds until its answer is decoded; released when destroyed.
  class Region {
   public:
    Region() = default;
    Region(Region&& other) noexcept { *this = std::move(other); }
    Region& operator=(Region&& other) noexcept;
    ~Region() { reset(); }
    void reset();  // gives the bytes back (nothing when empty)
    explicit operator bool() const { return segment_ != nullptr; }
    // The view the codecs take (wire::SharedRegion), with min_tensor_bytes for encoding.
    wire::SharedRegion view(std::size_t min_tensor_bytes) const;

   private:
    friend class SharedSegment;
    std::shared_ptr<SharedSegment> segment_;
    std::uint64_t offset_ = 0, bytes_ = 0;
  };

  // `bytes` rounded up to the alignment, first fit; an empty Region when no free run is that large.
  Region allocate(std::uint64_t bytes);
  // The largest free run (for a caller that can make do with less).
  std::uint64_t largest_free() const;

  wire::SegmentOffer offer() const;  // this process's pid, the memfd, the size, the token
  std::size_t size() const { return size_; }
  char* data() const { return base_; }
  std::uint64_t free_bytes() const;  // for tests: everything given back shows here

 private:
  SharedSegment() = default;
  void release(std::uint64_t offset, std::uint64_t bytes);

  int fd_ = -1;
  char* base_ = nullptr;
  std::size_t size_ = 0;
  std::string token_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> bytes, no two adjacent (coalesced)
};

// Servers this process started itself on this machine (a flow's own Python workers, python_workers.cpp)
// whose connections get a segment of `bytes`: the owner of the worker registers its "host:port" while the
// worker is its own, and forgets it (bytes 0) when it stops; RemoteHost offers a segment to a version 4
// server at a registered address only (any other server gets plain frames). Any thread.
void offer_shared_memory(const std::string& address, std::size_t bytes);
std::size_t shared_memory_for(const std::string& address);  // 0: none

// Tensors smaller than this cross inline even with a segment (an embedding of 384 floats: 1.5 KiB).
inline constexpr std::size_t kSharedMinTensorBytes = 16 * 1024;

}  // namespace flowline::remote
