// A shared library without the flowline entry point.
extern "C" int some_other_function() { return 1; }
