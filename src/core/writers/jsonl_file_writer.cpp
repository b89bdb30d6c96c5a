// The JSONL DocumentWriter (writers.hpp): documents are cut into pieces, formatted on a pool of threads, and
// appended in order by one writer thread in blocks of at least 1 MiB that always end on a newline.
#include "flowline/error.hpp"
#include "flowline/io.hpp"
#include "flowline/writers.hpp"
#include "flowline/output_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <time.h>

namespace flowline {

DocumentWriter::~DocumentWriter() = default;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// CPU time of the calling thread: formatting time that does not count waiting for a core.
double thread_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

constexpr std::size_t kBlockBytes = 1 << 20;                 // write when this much is formatted
constexpr std::size_t kMaxQueuedDocuments = 1 << 15;         // write() waits while more are queued
constexpr auto kIdleFlush = std::chrono::milliseconds(500);  // a partly filled block is written after this

// A run of documents of one write() call, formatted as one string.
struct Piece {
  std::shared_ptr<const DocumentArray> owned;  // set when the writer took the documents
  const DocumentArray* docs = nullptr;
  std::size_t begin = 0, end = 0;
  std::size_t* pending = nullptr;  // the borrowing write()'s count of pieces not yet formatted
  std::string text;
  bool formatted = false;
};

class JsonlFileWriter final : public DocumentWriter {
 public:
  // `file` is PATH.partial, or standard output.
  JsonlFileWriter(std::unique_ptr<OutputFile> file, const WriterOptions& options)
      : path_(file->path()), fields_(options.fields), file_(std::move(file)) {
    if (options.resume_from) {
      stats_.documents = handed_ = options.resume_from->documents;
      stats_.formatted_bytes = options.resume_from->bytes;
    }
    std::size_t threads = options.threads;
    if (threads == 0) threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8);
    threads_ = threads;
    for (std::size_t i = 0; i < threads; ++i) formatters_.emplace_back([this] { format_loop(); });
    writer_ = std::thread([this] { write_loop(); });
  }

  ~JsonlFileWriter() override { abandon(); }

  void write(const DocumentArray& docs) override {
    std::size_t pending = 0;
    enqueue(nullptr, &docs, &pending);
    // Help format while this call's pieces are pending: the documents are only borrowed until we return.
    std::unique_lock lock(mutex_);
    while (pending > 0) {
      if (!todo_.empty()) {
        format_one(lock);
      } else {
        done_.wait(lock);
      }
    }
    throw_if_failed(lock);
  }

  void write(DocumentArray&& docs) override {
    auto owned = std::make_shared<const DocumentArray>(std::move(docs));
    enqueue(owned, owned.get(), nullptr);
  }

  void close() override {
    if (!finish_writing()) return;
    const auto start = Clock::now();
    file_->commit();
    std::lock_guard lock(mutex_);
    stats_.write_seconds += seconds_since(start);
  }

  std::filesystem::path close_partial() override {
    if (!finish_writing()) return {};
    return file_->leave_partial(file_->bytes() > 0);
  }

  void abandon() noexcept override {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      abandoning_ = true;
      closing_ = true;
      work_.notify_all();
      done_.notify_all();
    }
    join();
    std::lock_guard lock(mutex_);
    closed_ = true;
    file_->leave_partial(file_->bytes() > 0);
  }

  SyncPoint sync() override {
    std::unique_lock lock(mutex_);
    throw_if_failed(lock);
    if (closing_) throw Error(fmt::format("'{}': sync after close", path_.string()));
    sync_wanted_ = true;
    done_.notify_all();
    // Help format meanwhile: on a small machine the caller's thread is one of few.
    while (stats_.documents < handed_ && error_.empty()) {
      if (!todo_.empty()) {
        format_one(lock);
      } else {
        done_.wait(lock);
      }
    }
    sync_wanted_ = false;
    throw_if_failed(lock);
    const SyncPoint point{stats_.documents, file_->bytes(), 0};
    lock.unlock();
    const auto start = Clock::now();
    if (std::string error = file_->sync(); !error.empty()) throw Error(error);
    lock.lock();
    stats_.write_seconds += seconds_since(start);
    return point;
  }

  WriterStats stats() const override {
    std::lock_guard lock(mutex_);
    WriterStats s = stats_;
    s.bytes = file_->bytes();
    return s;
  }

  const std::filesystem::path& path() const override { return path_; }

 private:
  // Writes everything handed over and ends the writer's threads. Returns false when the writer had already
  // ended. On a write error the file is left partial (with the whole lines it holds) and the error thrown.
  // Otherwise nothing is renamed here: the caller commits the file or leaves it partial.
  bool finish_writing() {
    {
      std::unique_lock lock(mutex_);
      if (closed_) return false;
      closing_ = true;
      work_.notify_all();
      done_.notify_all();
    }
    join();
    std::unique_lock lock(mutex_);
    closed_ = true;
    if (!error_.empty()) {
      // Bytes, not documents: a write that failed midway leaves the lines before it and part of one more.
      file_->leave_partial(file_->bytes() > 0);
      throw_if_failed(lock);
    }
    return true;
  }

  void enqueue(std::shared_ptr<const DocumentArray> owned, const DocumentArray* docs, std::size_t* pending) {
    if (docs->empty()) return;
    const std::size_t n = docs->size();
    const std::size_t piece = std::clamp<std::size_t>((n + threads_ - 1) / threads_, 16, 512);
    std::unique_lock lock(mutex_);
    throw_if_failed(lock);
    if (closing_) throw Error(fmt::format("'{}': write after close", path_.string()));
    done_.wait(lock, [&] { return queued_documents_ < kMaxQueuedDocuments || !error_.empty(); });
    throw_if_failed(lock);
    for (std::size_t begin = 0; begin < n; begin += piece) {
      auto p = std::make_unique<Piece>();
      p->owned = owned;
      p->docs = docs;
      p->begin = begin;
      p->end = std::min(n, begin + piece);
      p->pending = pending;
      if (pending) ++*pending;
      todo_.push_back(p.get());
      order_.push_back(std::move(p));
    }
    queued_documents_ += n;
    handed_ += n;
    work_.notify_all();
  }

  // Takes the next piece to format and formats it, unlocked. Called with the lock held and todo_ not empty.
  void format_one(std::unique_lock<std::mutex>& lock) {
    Piece* piece = todo_.front();
    todo_.pop_front();
    lock.unlock();
    const double start = thread_seconds();
    std::string text;
    std::string error;
    std::size_t i = piece->begin;
    try {
      text.reserve((piece->end - piece->begin) * bytes_per_document_.load(std::memory_order_relaxed) * 9 / 8);
      for (; i < piece->end; ++i) {
        append_json(text, (*piece->docs)[i], fields_);
        text += '\n';
      }
    } catch (const std::exception& e) {
      error = fmt::format("'{}': cannot write document '{}': {}", path_.string(), (*piece->docs)[i].id, e.what());
    }
    const double seconds = thread_seconds() - start;
    if (piece->end > piece->begin && !text.empty()) {
      bytes_per_document_.store(text.size() / (piece->end - piece->begin), std::memory_order_relaxed);
    }
    lock.lock();
    piece->text = std::move(text);
    piece->formatted = true;
    piece->owned.reset();
    piece->docs = nullptr;
    if (piece->pending) --*piece->pending;
    if (!error.empty() && error_.empty()) error_ = std::move(error);
    stats_.format_seconds += seconds;
    stats_.formatted_bytes += piece->text.size();
    done_.notify_all();
  }

  void format_loop() {
    std::unique_lock lock(mutex_);
    while (true) {
      work_.wait(lock, [&] { return !todo_.empty() || closing_; });
      if (abandoning_ || (todo_.empty() && closing_)) return;
      format_one(lock);
    }
  }

  // Moves the formatted pieces at the front of order_ into `block`; returns how many documents they hold.
  std::size_t take_formatted(std::string& block) {
    std::size_t documents = 0;
    while (!order_.empty() && order_.front()->formatted) {
      block += order_.front()->text;
      documents += order_.front()->end - order_.front()->begin;
      order_.pop_front();
    }
    return documents;
  }

  void write_loop() {
    std::string block;
    std::size_t block_documents = 0;
    std::unique_lock lock(mutex_);
    while (true) {
      const bool woke = done_.wait_for(lock, kIdleFlush, [&] {
        return (!order_.empty() && order_.front()->formatted) || (closing_ && order_.empty()) || abandoning_ ||
               !error_.empty() || (sync_wanted_ && !block.empty());
      });
      const std::size_t taken = take_formatted(block);
      block_documents += taken;
      queued_documents_ -= taken;
      if (taken) done_.notify_all();
      const bool finished = abandoning_ || !error_.empty() || (closing_ && order_.empty());
      if (!block.empty() && (block.size() >= kBlockBytes || !woke || finished || sync_wanted_)) {
        lock.unlock();
        const auto start = Clock::now();
        std::string error = file_->write(block);
        const double seconds = seconds_since(start);
        lock.lock();
        stats_.write_seconds += seconds;
        if (error.empty()) {
          stats_.documents += block_documents;
        } else if (error_.empty()) {
          error_ = std::move(error);
        }
        block.clear();
        block_documents = 0;
        done_.notify_all();  // a sync() may be waiting for these documents
      }
      if (finished) return;
    }
  }

  void join() {
    for (auto& t : formatters_) {
      if (t.joinable()) t.join();
    }
    if (writer_.joinable()) writer_.join();
  }

  void throw_if_failed(std::unique_lock<std::mutex>&) const {
    if (!error_.empty()) throw Error(error_);
  }

  const std::filesystem::path path_;
  const FieldSet fields_;
  std::size_t threads_ = 1;
  std::unique_ptr<OutputFile> file_;
  mutable std::mutex mutex_;
  std::condition_variable work_;              // todo_ has pieces, or closing
  std::condition_variable done_;              // a piece was formatted or written, or closing
  std::deque<std::unique_ptr<Piece>> order_;  // every piece not yet written, in output order
  std::deque<Piece*> todo_;                   // pieces not yet formatted, in output order
  std::size_t queued_documents_ = 0;
  std::uint64_t handed_ = 0;                          // documents handed to write() (and any before a resume point)
  bool sync_wanted_ = false;                          // a sync() waits: write a partly filled block at once
  std::atomic<std::size_t> bytes_per_document_{512};  // of the last piece: sizes the next piece's string
  bool closing_ = false, abandoning_ = false, closed_ = false;
  std::string error_;
  WriterStats stats_;
  std::vector<std::thread> formatters_;
  std::thread writer_;
};

}  // namespace

std::unique_ptr<DocumentWriter> open_jsonl_writer(const std::filesystem::path& path, const WriterOptions& options) {
  if (options.resume_from) {
    return std::make_unique<JsonlFileWriter>(
        std::make_unique<OutputFile>(path, OutputFile::Resume{options.resume_from->bytes}), options);
  }
  return std::make_unique<JsonlFileWriter>(std::make_unique<OutputFile>(path), options);
}

std::unique_ptr<DocumentWriter> open_jsonl_stdout_writer(const WriterOptions& options) {
  return std::make_unique<JsonlFileWriter>(std::make_unique<OutputFile>(OutputFile::StandardOutput{}), options);
}

}  // namespace flowline
