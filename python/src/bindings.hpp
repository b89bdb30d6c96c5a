// python/src/bindings.hpp — what the three files of the extension module flowline._flowline share.
//
// All of these run on a Python thread holding the GIL: they create or read Python objects. The Flow's
// work between them runs with the GIL released (module.cpp). Errors: a Python value of the wrong type is a
// nb::type_error (TypeError) naming where it was and what was expected; anything the core refuses is the
// flowline::Error it throws, which module.cpp translates to flowline.FlowError.
#pragma once

#include "flowline/document.hpp"

#include <boost/json/value.hpp>
#include <nanobind/nanobind.h>

#include <cstddef>
#include <string>

namespace flowline::python {

namespace nb = nanobind;

// JSON values (tags, parameters) to Python and back: null None, bool, int, float, str, list, dict.
// Integers stay integers. `where` names the value in a TypeError ("parameters['top_n']").
nb::object json_to_python(const boost::json::value& value);
boost::json::value python_to_json(nb::handle object, const std::string& where);
// A dict with str keys as a JSON object; TypeError for anything else.
boost::json::object python_to_json_object(nb::handle object, const std::string& where);

// A tensor as a numpy array that shares its memory (no copy) and keeps it alive; a GPU tensor (or one
// numpy has no dtype for: bfloat16) is copied to a CPU float32 array first. An undefined tensor is None.
nb::object tensor_to_numpy(const at::Tensor& tensor);
// Anything with __dlpack__ or the buffer protocol (a numpy array, a torch tensor, a list of numbers via
// numpy) as a tensor that owns a copy of the data. `where` names it in a TypeError.
at::Tensor tensor_from_python(nb::handle object, const std::string& where);

// One input of Flow.post(): a str (a text document), a dict in Jina's document JSON shape (tensors may
// be arrays too) or a flowline.Document (copied). TypeError naming `inputs[index]` otherwise.
Document document_from_python(nb::handle object, std::size_t index);

// Registers flowline.Document.
void bind_documents(nb::module_& module);
// Registers _register_python_executor (flowline.Executor's subclasses as executor types; executors.cpp).
void bind_executors(nb::module_& module);

}  // namespace flowline::python
