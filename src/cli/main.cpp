// flowline: run, validate and inspect YAML flows. See `flowline --help`.
#include "launcher.hpp"

int main(int argc, char** argv) { return flowline::cli::run(argc, argv); }
