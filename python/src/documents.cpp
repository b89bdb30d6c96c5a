// flowline.Document and the conversions of documents and tensors between Python and C++.
//
// Tensors leave C++ without a copy: a numpy array over the at::Tensor's memory, owning a reference to it
// (torch.from_numpy / torch.from_dlpack of that array share the memory again). Tensors entering C++ are
// copied once into a tensor the document owns, so nothing in C++ points into Python's memory.
#include "bindings.hpp"

#include "flowline/error.hpp"
#include "flowline/io.hpp"

#include <ATen/ops/from_blob.h>
#include <fmt/format.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flowline::python {
namespace {

namespace dl = nb::dlpack;

// numpy's dtype for an ATen scalar type; nullopt where numpy has none (bfloat16, complex halves).
std::optional<dl::dtype> numpy_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return dl::dtype{uint8_t(dl::dtype_code::Float), 32, 1};
    case at::kDouble:
      return dl::dtype{uint8_t(dl::dtype_code::Float), 64, 1};
    case at::kHalf:
      return dl::dtype{uint8_t(dl::dtype_code::Float), 16, 1};
    case at::kLong:
      return dl::dtype{uint8_t(dl::dtype_code::Int), 64, 1};
    case at::kInt:
      return dl::dtype{uint8_t(dl::dtype_code::Int), 32, 1};
    case at::kShort:
      return dl::dtype{uint8_t(dl::dtype_code::Int), 16, 1};
    case at::kChar:
      return dl::dtype{uint8_t(dl::dtype_code::Int), 8, 1};
    case at::kByte:
      return dl::dtype{uint8_t(dl::dtype_code::UInt), 8, 1};
    case at::kBool:
      return dl::dtype{uint8_t(dl::dtype_code::Bool), 8, 1};
    default:
      return std::nullopt;
  }
}

std::optional<at::ScalarType> aten_type(dl::dtype type) {
  using C = dl::dtype_code;
  const auto code = static_cast<C>(type.code);
  if (type.lanes != 1) return std::nullopt;
  if (code == C::Float && type.bits == 32) return at::kFloat;
  if (code == C::Float && type.bits == 64) return at::kDouble;
  if (code == C::Float && type.bits == 16) return at::kHalf;
  if (code == C::Bfloat && type.bits == 16) return at::kBFloat16;
  if (code == C::Int && type.bits == 64) return at::kLong;
  if (code == C::Int && type.bits == 32) return at::kInt;
  if (code == C::Int && type.bits == 16) return at::kShort;
  if (code == C::Int && type.bits == 8) return at::kChar;
  if (code == C::UInt && type.bits == 8) return at::kByte;
  if (code == C::Bool && type.bits == 8) return at::kBool;
  return std::nullopt;
}

using AnyCpuArray = nb::ndarray<nb::ro, nb::device::cpu>;

}  // namespace

nb::object tensor_to_numpy(const at::Tensor& tensor) {
  if (!tensor.defined()) return nb::none();
  at::Tensor t = tensor;
  if (!t.device().is_cpu() || !numpy_dtype(t.scalar_type())) {
    t = t.to(at::kCPU, numpy_dtype(t.scalar_type()) ? t.scalar_type() : at::kFloat);
  }
  std::vector<std::size_t> shape(t.sizes().begin(), t.sizes().end());
  std::vector<std::int64_t> strides(t.strides().begin(), t.strides().end());
  // The capsule owns a reference to the tensor's storage for as long as numpy (or torch) uses the memory.
  auto* owned = new at::Tensor(t);
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<at::Tensor*>(p); });
  nb::ndarray<nb::numpy> array(owned->data_ptr(), shape.size(), shape.data(), owner, strides.data(),
                               *numpy_dtype(t.scalar_type()));
  return nb::cast(std::move(array), nb::rv_policy::reference);
}

at::Tensor tensor_from_python(nb::handle object, const std::string& where) {
  nb::object source = nb::borrow(object);
  if (nb::isinstance<nb::list>(object) || nb::isinstance<nb::tuple>(object)) {
    source = nb::module_::import_("numpy").attr("asarray")(object, "float32");
  }
  AnyCpuArray array;
  if (!nb::try_cast(source, array, false)) {
    throw nb::type_error(fmt::format("{}: expected a numpy array, a CPU torch tensor or a list of numbers, not {}",
                                     where, nb::type_name(object.type()).c_str())
                             .c_str());
  }
  const auto type = aten_type(array.dtype());
  if (!type)
    throw nb::type_error(fmt::format("{}: an array of a dtype flowline has no tensor type for", where).c_str());
  std::vector<std::int64_t> sizes(array.ndim()), strides(array.ndim());
  for (std::size_t i = 0; i < array.ndim(); ++i) {
    sizes[i] = static_cast<std::int64_t>(array.shape(i));
    strides[i] = array.stride(i);
  }
  const at::Tensor view =
      at::from_blob(const_cast<void*>(array.data()), sizes, strides, at::TensorOptions().dtype(*type));
  return view.clone(at::MemoryFormat::Contiguous);
}

namespace {

// An array, or a plain list of numbers as Jina's documents write their tensors in JSON; flowline's own
// {"dtype", "shape", "data"} form is a dict and goes to the JSON reader.
DocumentArray documents_from_python(nb::handle object, const std::string& field);

bool is_array_like(nb::handle object) {
  return nb::isinstance<nb::list>(object) || nb::isinstance<nb::tuple>(object) || nb::hasattr(object, "__dlpack__") ||
         nb::hasattr(object, "__array_interface__");
}

Document document_from_dict(nb::handle object, std::size_t index) {
  const std::string where = fmt::format("inputs[{}]", index);
  nb::dict fields = nb::borrow<nb::dict>(object);
  // Arrays in the tensor fields go straight in, chunks and matches are documents of any input form;
  // everything else is Jina's document JSON.
  nb::dict json_fields;
  std::vector<std::pair<std::string, nb::handle>> arrays, nested;
  for (auto [key, value] : fields) {
    const std::string name = nb::isinstance<nb::str>(key) ? nb::cast<std::string>(key) : std::string();
    if ((name == "tensor" || name == "embedding") && is_array_like(value)) {
      arrays.emplace_back(name, value);
    } else if ((name == "chunks" || name == "matches") && !value.is_none()) {
      nested.emplace_back(name, value);
    } else {
      json_fields[key] = value;
    }
  }
  Document doc;
  try {
    doc = document_from_json(python_to_json_object(json_fields, where));
  } catch (const nb::python_error&) {
    throw;
  } catch (const nb::builtin_exception&) {
    throw;
  } catch (const Error& e) {
    throw nb::value_error(fmt::format("{}: {}", where, e.what()).c_str());
  }
  for (auto& [name, value] : arrays) {
    (name == "tensor" ? doc.tensor : doc.embedding) = tensor_from_python(value, fmt::format("{}['{}']", where, name));
  }
  for (auto& [name, value] : nested) {
    (name == "chunks" ? doc.chunks : doc.matches) = documents_from_python(value, fmt::format("{}['{}']", where, name));
  }
  return doc;
}

}  // namespace

Document document_from_python(nb::handle object, std::size_t index) {
  if (nb::isinstance<Document>(object)) return nb::cast<const Document&>(object);
  if (nb::isinstance<nb::str>(object)) return Document(nb::cast<std::string>(object));
  if (nb::isinstance<nb::dict>(object)) return document_from_dict(object, index);
  throw nb::type_error(fmt::format("inputs[{}]: expected a str, a dict (Jina's document JSON) or a "
                                   "flowline.Document, not {}",
                                   index, nb::type_name(object.type()).c_str())
                           .c_str());
}

namespace {

nb::list documents_to_python(const DocumentArray& docs) {
  nb::list list;
  for (const Document& d : docs) list.append(nb::cast(d, nb::rv_policy::copy));
  return list;
}

DocumentArray documents_from_python(nb::handle object, const std::string& field) {
  if (!nb::isinstance<nb::list>(object) && !nb::isinstance<nb::tuple>(object)) {
    throw nb::type_error(fmt::format("{}: expected a list of documents", field).c_str());
  }
  DocumentArray docs;
  std::size_t i = 0;
  for (nb::handle item : object) docs.push_back(document_from_python(item, i++));
  return docs;
}

nb::dict scores_to_python(const Document& d) {
  nb::dict dict;
  for (const auto& [name, value] : d.scores) dict[nb::str(name.data(), name.size())] = nb::float_(value);
  return dict;
}

void set_scores(Document& d, nb::handle object) {
  const boost::json::object scores = python_to_json_object(object, "Document.scores");
  d.scores.clear();
  for (const auto& [name, value] : scores) {
    if (!value.is_number()) throw nb::type_error(fmt::format("Document.scores['{}']: expected a number", name).c_str());
    d.scores[std::string(name)] = static_cast<float>(value.to_number<double>());
  }
}

void init_document(Document* self, nb::handle text, nb::handle id, nb::handle tags, nb::handle embedding,
                   nb::handle tensor) {
  new (self) Document();
  if (!text.is_none()) self->text = nb::cast<std::string>(text);
  if (!id.is_none()) self->id = nb::cast<std::string>(id);
  if (!tags.is_none()) self->tags = python_to_json_object(tags, "Document.tags");
  if (!embedding.is_none()) self->embedding = tensor_from_python(embedding, "Document.embedding");
  if (!tensor.is_none()) self->tensor = tensor_from_python(tensor, "Document.tensor");
}

// doc.tags: a live mapping over the document's tags, so that `doc.tags["k"] = v` changes the document as
// in Jina. Values read out are Python copies (a nested list changed in place is not written back: assign
// the key again). The view keeps its document's Python object alive.
struct TagsView {
  Document* doc;

  const boost::json::value& at(const std::string& key) const {
    const auto* v = doc->tags.if_contains(key);
    if (v == nullptr) throw nb::key_error(key.c_str());
    return *v;
  }
  nb::dict to_dict() const { return nb::borrow<nb::dict>(json_to_python(boost::json::value(doc->tags))); }
  nb::list keys() const {
    nb::list out;
    for (const auto& kv : doc->tags) out.append(nb::str(kv.key().data(), kv.key().size()));
    return out;
  }
};

boost::json::object tags_from_python(nb::handle v) {
  if (nb::isinstance<TagsView>(v)) return nb::cast<const TagsView&>(v).doc->tags;
  return python_to_json_object(v, "Document.tags");
}

void bind_tags_view(nb::module_& m) {
  using T = TagsView;
  nb::class_<T>(m, "Tags", "A document's tags: a dict-like view that writes through to the document.")
      .def("__getitem__", [](const T& t, const std::string& k) { return json_to_python(t.at(k)); })
      .def("__setitem__",
           [](T& t, const std::string& k, nb::handle v) {
             t.doc->tags[k] = python_to_json(v, fmt::format("Document.tags['{}']", k));
           })
      .def("__delitem__",
           [](T& t, const std::string& k) {
             if (!t.doc->tags.erase(k)) throw nb::key_error(k.c_str());
           })
      .def("__contains__",
           [](const T& t, nb::handle k) {
             return nb::isinstance<nb::str>(k) && t.doc->tags.contains(nb::cast<std::string>(k));
           })
      .def("__len__", [](const T& t) { return t.doc->tags.size(); })
      .def("__iter__", [](const T& t) { return nb::iter(t.keys()); })
      .def("__eq__", [](const T& t, nb::handle other) { return t.to_dict().equal(other); })
      .def("__repr__", [](const T& t) { return nb::repr(t.to_dict()); })
      .def("keys", &T::keys)
      .def("values", [](const T& t) { return t.to_dict().values(); })
      .def("items", [](const T& t) { return t.to_dict().items(); })
      .def("to_dict", &T::to_dict, "A dict copy of the tags.")
      .def(
          "get",
          [](const T& t, const std::string& k, nb::object fallback) {
            const auto* v = t.doc->tags.if_contains(k);
            return v == nullptr ? fallback : json_to_python(*v);
          },
          nb::arg("key"), nb::arg("default") = nb::none())
      .def("pop",
           [](T& t, const std::string& k) {
             nb::object out = json_to_python(t.at(k));
             t.doc->tags.erase(k);
             return out;
           })
      .def("pop",
           [](T& t, const std::string& k, nb::object fallback) {
             const auto* v = t.doc->tags.if_contains(k);
             if (v == nullptr) return fallback;
             nb::object out = json_to_python(*v);
             t.doc->tags.erase(k);
             return out;
           })
      .def("update", [](T& t, nb::handle other) {
        for (auto& kv : tags_from_python(other)) t.doc->tags[kv.key()] = kv.value();
      });
}

}  // namespace

void bind_documents(nb::module_& m) {
  bind_tags_view(m);
  using D = Document;
  nb::class_<D>(m, "Document",
                "A document as Jina's: id, text, blob, tensor, embedding, tags, mime_type, uri, scores, chunks, "
                "matches, parent_id. tensor and embedding read as numpy arrays sharing the document's memory; "
                "tags is a view that writes through (doc.tags['k'] = v); scores, chunks and matches read as "
                "copies (assign the whole field to change it).")
      .def("__init__", &init_document, nb::arg("text") = nb::none(), nb::kw_only(), nb::arg("id") = nb::none(),
           nb::arg("tags") = nb::none(), nb::arg("embedding") = nb::none(), nb::arg("tensor") = nb::none())
      .def_rw("id", &D::id)
      .def_rw("text", &D::text)
      .def_rw("mime_type", &D::mime_type)
      .def_rw("uri", &D::uri)
      .def_rw("parent_id", &D::parent_id)
      .def_prop_rw(
          "blob", [](const D& d) { return nb::bytes(reinterpret_cast<const char*>(d.blob.data()), d.blob.size()); },
          [](D& d, nb::bytes b) {
            const auto* p = static_cast<const std::uint8_t*>(b.data());
            d.blob.assign(p, p + b.size());
          })
      .def_prop_rw(
          "tensor", [](const D& d) { return tensor_to_numpy(d.tensor); },
          [](D& d, nb::handle v) { d.tensor = v.is_none() ? at::Tensor() : tensor_from_python(v, "Document.tensor"); })
      .def_prop_rw(
          "embedding", [](const D& d) { return tensor_to_numpy(d.embedding); },
          [](D& d, nb::handle v) {
            d.embedding = v.is_none() ? at::Tensor() : tensor_from_python(v, "Document.embedding");
          })
      .def_prop_rw(
          "tags", [](D& d) { return TagsView{&d}; }, [](D& d, nb::handle v) { d.tags = tags_from_python(v); },
          nb::for_getter(nb::keep_alive<0, 1>()))
      .def_prop_rw("scores", &scores_to_python, &set_scores)
      .def_prop_rw(
          "chunks", [](const D& d) { return documents_to_python(d.chunks); },
          [](D& d, nb::handle v) { d.chunks = documents_from_python(v, "Document.chunks"); })
      .def_prop_rw(
          "matches", [](const D& d) { return documents_to_python(d.matches); },
          [](D& d, nb::handle v) { d.matches = documents_from_python(v, "Document.matches"); })
      .def(
          "to_json", [](const D& d) { return to_json(d); }, "Jina's document JSON, as flowline writes it to JSONL.")
      .def_static(
          "from_dict", [](nb::handle dict) { return document_from_python(dict, 0); }, nb::arg("fields"),
          "A document from a dict in Jina's document JSON shape (tensor and embedding may be arrays).")
      .def("__repr__", [](const D& d) {
        std::string text = d.text.size() > 40 ? d.text.substr(0, 40) + "..." : d.text;
        return fmt::format("Document(id='{}', text='{}'{}{})", d.id, text, d.embedding.defined() ? ", embedding" : "",
                           d.tensor.defined() ? ", tensor" : "");
      });
}

}  // namespace flowline::python
