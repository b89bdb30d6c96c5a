// JSON values between Python and boost::json: tags, request parameters and Jina-shaped document dicts.
#include "bindings.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <limits>

namespace flowline::python {

nb::object json_to_python(const boost::json::value& value) {
  switch (value.kind()) {
    case boost::json::kind::null:
      return nb::none();
    case boost::json::kind::bool_:
      return nb::bool_(value.get_bool());
    case boost::json::kind::int64:
      return nb::int_(value.get_int64());
    case boost::json::kind::uint64:
      return nb::steal(PyLong_FromUnsignedLongLong(value.get_uint64()));
    case boost::json::kind::double_:
      return nb::float_(value.get_double());
    case boost::json::kind::string: {
      const auto& s = value.get_string();
      return nb::str(s.data(), s.size());
    }
    case boost::json::kind::array: {
      nb::list list;
      for (const auto& item : value.get_array()) list.append(json_to_python(item));
      return list;
    }
    case boost::json::kind::object: {
      nb::dict dict;
      for (const auto& [key, item] : value.get_object()) {
        dict[nb::str(key.data(), key.size())] = json_to_python(item);
      }
      return dict;
    }
  }
  return nb::none();
}

namespace {

boost::json::value python_int_to_json(nb::handle object, const std::string& where) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(object.ptr(), &overflow);
  if (overflow == 0) return boost::json::value(static_cast<std::int64_t>(v));
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(object.ptr());
    if (!PyErr_Occurred()) return boost::json::value(static_cast<std::uint64_t>(u));
    PyErr_Clear();
  }
  throw nb::type_error(fmt::format("{}: integer out of the 64-bit range", where).c_str());
}

}  // namespace

boost::json::value python_to_json(nb::handle object, const std::string& where) {
  if (object.is_none()) return nullptr;
  if (PyBool_Check(object.ptr())) return object.ptr() == Py_True;
  if (PyLong_Check(object.ptr())) return python_int_to_json(object, where);
  if (PyFloat_Check(object.ptr())) return PyFloat_AsDouble(object.ptr());
  if (nb::isinstance<nb::str>(object)) return boost::json::value(nb::cast<std::string>(object));
  if (nb::isinstance<nb::dict>(object)) return python_to_json_object(object, where);
  if (nb::isinstance<nb::list>(object) || nb::isinstance<nb::tuple>(object)) {
    boost::json::array array;
    std::size_t i = 0;
    for (nb::handle item : object) {
      array.push_back(python_to_json(item, fmt::format("{}[{}]", where, i)));
      ++i;
    }
    return array;
  }
  // numpy scalars (np.float32(0.5), np.int64(3)) are numbers too.
  if (nb::hasattr(object, "item") && nb::hasattr(object, "dtype") && nb::len(nb::object(object.attr("shape"))) == 0) {
    return python_to_json(object.attr("item")(), where);
  }
  throw nb::type_error(fmt::format("{}: expected None, bool, int, float, str, list or dict, not {}", where,
                                   nb::type_name(object.type()).c_str())
                           .c_str());
}

boost::json::object python_to_json_object(nb::handle object, const std::string& where) {
  if (!nb::isinstance<nb::dict>(object)) {
    throw nb::type_error(
        fmt::format("{}: expected a dict, not {}", where, nb::type_name(object.type()).c_str()).c_str());
  }
  boost::json::object out;
  for (auto [key, item] : nb::borrow<nb::dict>(object)) {
    if (!nb::isinstance<nb::str>(key)) {
      throw nb::type_error(
          fmt::format("{}: keys must be str, not {}", where, nb::type_name(key.type()).c_str()).c_str());
    }
    const std::string name = nb::cast<std::string>(key);
    out[name] = python_to_json(item, fmt::format("{}['{}']", where, name));
  }
  return out;
}

}  // namespace flowline::python
