#if defined(FLOWLINE_CATCH3) || __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
#endif
