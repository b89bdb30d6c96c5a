// The I/O threads under the gateway's HTTP front and the executor server (src/common/net/tcp_server.hpp): one
// event loop (io_context) per thread, the listener's connections given to them in turn, so a connection's
// handlers all run on one thread and the threads share no queue.
#include "test_support.hpp"

#include "net/tcp_server.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using flowline::net::IoThreads;
using flowline::net::Listener;
using tcp = asio::ip::tcp;

// What the accepted connections saw: the event loop each socket was given and the threads its handlers ran on.
struct Seen {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<const asio::execution_context*> contexts;  // per connection, in accept order
  std::vector<std::set<std::thread::id>> threads;        // per connection: the threads of its handlers
  std::size_t handlers = 0;
};

struct Session : std::enable_shared_from_this<Session> {
  Listener<Session>::Registration registration;
  Listener<Session>& listener;
  tcp::socket socket;
  Session(Listener<Session>& l, tcp::socket s) : listener(l), socket(std::move(s)) {}
  ~Session() { listener.forget(registration); }
};

}  // namespace

TEST_CASE("the I/O threads give each new connection the next thread's event loop, and its handlers stay on that thread",
          "[gateway][io]") {
  constexpr int kThreads = 3, kConnections = 6, kHandlers = 20;
  Seen seen;
  std::vector<std::shared_ptr<Session>> sessions;
  Listener<Session> listener;  // before the threads: the sessions unregister from it
  IoThreads threads;
  const std::uint16_t port = listener.bind(threads, "127.0.0.1", 0);
  listener.accept(
      kConnections, [&](tcp::socket socket) { return std::make_shared<Session>(listener, std::move(socket)); },
      [&](Session& session) {
        std::size_t index = 0;
        {
          std::lock_guard lock(seen.mutex);
          index = seen.contexts.size();
          seen.contexts.push_back(&asio::query(session.socket.get_executor(), asio::execution::context));
          seen.threads.emplace_back();
          sessions.push_back(session.shared_from_this());  // held here, as a server's pending operations would
        }
        // Handlers of this connection, posted to its socket's executor (a strand over its event loop) and to the
        // strand a session would take for its timers (strand_of): every one on the same thread.
        auto strand = flowline::net::strand_of(session.socket, threads.context());
        for (int h = 0; h < kHandlers; ++h) {
          auto record = [&seen, index] {
            std::lock_guard lock(seen.mutex);
            seen.threads[index].insert(std::this_thread::get_id());
            seen.handlers++;
            seen.changed.notify_all();
          };
          if (h % 2) {
            asio::post(session.socket.get_executor(), record);
          } else {
            asio::post(strand, record);
          }
        }
      });
  threads.start(kThreads);

  asio::io_context client_io;
  std::vector<tcp::socket> clients;
  for (int c = 0; c < kConnections; ++c) {
    clients.emplace_back(client_io);
    clients.back().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  {
    std::unique_lock lock(seen.mutex);
    REQUIRE(seen.changed.wait_for(lock, std::chrono::seconds(10),
                                  [&] { return seen.handlers == std::size_t{kConnections * kHandlers}; }));
  }
  std::map<const asio::execution_context*, int> per_context;
  std::set<std::thread::id> all_threads;
  for (std::size_t i = 0; i < seen.contexts.size(); ++i) {
    per_context[seen.contexts[i]]++;
    INFO("connection " << i);
    CHECK(seen.threads[i].size() == 1);  // one thread ran all of this connection's handlers
    all_threads.insert(seen.threads[i].begin(), seen.threads[i].end());
  }
  CHECK(per_context.size() == std::size_t{kThreads});  // in turn: two connections on each event loop
  for (const auto& [context, count] : per_context) CHECK(count == kConnections / kThreads);
  CHECK(all_threads.size() == std::size_t{kThreads});
  // Connections on the same event loop share its thread; connections on different ones do not.
  for (std::size_t i = 0; i < seen.contexts.size(); ++i) {
    for (std::size_t j = i + 1; j < seen.contexts.size(); ++j) {
      CHECK((seen.contexts[i] == seen.contexts[j]) == (seen.threads[i] == seen.threads[j]));
    }
  }

  listener.close();
  for (auto& client : clients) client.close();
  sessions.clear();
  threads.stop();
  listener.release();
}
