// Boost.JSON's implementation, compiled here where only its headers are installed (see
// cmake/FlowlineDependencies.cmake). flowline::core exports it to everything that links flowline.
#include <boost/json/src.hpp>
