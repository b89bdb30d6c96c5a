// flowline/registry.hpp — the table of executor types a flow may `use`.
//
// Registry::global() holds the built-in executors and everything plugins and programs add. Adding and
// looking up are thread-safe. Adding a name that is already there throws flowline::Error (never exits);
// looking up an unknown name throws an error that lists the known names and suggests the closest one.
//
// A registry made with ExecutorSearch::on (Registry::global() is one) completes itself on demand: find()
// of a name it does not hold loads that executor's plugin from the plugin search path by the conventional
// file name (flowline/plugin.hpp: SentenceEncoder -> libflowline_sentence_encoder.so), so a flow may use
// first-party executors such as SentenceEncoder and TorchModule with no `plugins:` entry. A registry made
// with the default constructor is a plain table: it holds only what is added to it.
//
//   registry.add<MyExecutor>();   // MyExecutor has `static ExecutorSpec spec()` and a constructor
//                                 // taking `const ExecutorContext&`; optionally
//                                 // `static std::vector<EndpointParams> request_params()`: the request
//                                 // parameters of its endpoints, checked before its handlers run
//                                 // (flowline/params.hpp). They sit beside the spec, not in it, so that
//                                 // ExecutorSpec keeps the layout plugins built against API 4.0 share.
#pragma once

#include "flowline/executor.hpp"

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace flowline {

using ExecutorFactory = std::function<std::unique_ptr<Executor>(const ExecutorContext&)>;

class Registry {
 public:
  struct Entry {
    ExecutorSpec spec;
    ExecutorFactory factory;
    std::string origin;  // "built-in", a plugin's path, or "program"
    // Its endpoints' request parameters (API 4.1; empty for executors that declare none).
    std::vector<EndpointParams> request_params;
  };

  enum class ExecutorSearch { off, on };

  Registry() = default;
  explicit Registry(ExecutorSearch search) : search_(search) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry, with the built-in executors already in it; searches the executor folder.
  static Registry& global();

  // Adds an executor type. Throws flowline::Error when the name is taken or the spec is malformed.
  void add(ExecutorSpec spec, ExecutorFactory factory, std::string origin = "program");
  // The same, with the request parameters of its endpoints; each names "*" or an endpoint of the spec.
  void add(ExecutorSpec spec, std::vector<EndpointParams> request_params, ExecutorFactory factory,
           std::string origin = "program");

  template <class T>
  void add(std::string origin = "program") {
    static_assert(std::is_base_of_v<Executor, T>, "an executor type must derive from flowline::Executor");
    static_assert(std::is_same_v<decltype(T::spec()), ExecutorSpec>,
                  "an executor type needs `static flowline::ExecutorSpec spec()`");
    static_assert(std::is_constructible_v<T, const ExecutorContext&>,
                  "an executor type needs a constructor taking `const flowline::ExecutorContext&`");
    ExecutorFactory factory = [](const ExecutorContext& context) -> std::unique_ptr<Executor> {
      return std::make_unique<T>(context);
    };
    if constexpr (has_request_params<T>::value) {
      add(T::spec(), T::request_params(), std::move(factory), std::move(origin));
    } else {
      add(T::spec(), std::move(factory), std::move(origin));
    }
  }

  // The entry for `name`, or nullptr. The pointer stays valid for the registry's lifetime. With
  // ExecutorSearch::on, a name not yet registered is first looked for in the plugin search path (this
  // loads a plugin, which is why a const registry may grow); a plugin that is there but fails to load
  // throws flowline::Error naming the file.
  const Entry* find(std::string_view name) const;
  // The entry for `name` if it is registered now, never loading anything.
  const Entry* find_registered(std::string_view name) const;
  // The entry for `name`; throws flowline::Error listing known names and a "did you mean" hint.
  const Entry& get(std::string_view name) const;
  // "unknown executor type 'X' (did you mean 'Y'?); known types: A, B, C". With ExecutorSearch::on the
  // known types include those the executor folder offers (not loaded yet).
  std::string unknown_message(std::string_view name) const;
  std::vector<std::string> names() const;
  std::size_t size() const;

 private:
  template <class T, class = void>
  struct has_request_params : std::false_type {};
  template <class T>
  struct has_request_params<T, std::void_t<decltype(T::request_params())>> : std::true_type {};

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Entry>> entries_;
  ExecutorSearch search_ = ExecutorSearch::off;
};

// Adds the executors that ship inside flowline::core (TextSplitter, JsonlWriter, TsvWriter, NoOp, TextStats).
// Registry::global() has them already; call this for a registry of your own.
void register_builtin_executors(Registry& registry);

}  // namespace flowline
