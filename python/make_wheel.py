"""Packs an installed copy of the flowline package (cmake --install's python/flowline and lib/) into a wheel.

    python python/make_wheel.py --stage STAGE --out DIR --version 0.1.0 --torch 2.11.0

STAGE holds what `cmake --install build --prefix STAGE` (default and python components) wrote. The wheel's
package is STAGE/python/flowline plus flowline's own libraries in flowline/lib (libflowline*.so and the
executor folder lib/flowline/executors): no LibTorch, which comes from the torch wheel it requires. Its tag
is this Python's (cp311-cp311-linux_x86_64): the extension is built for one Python and one platform, and
links Debian 12's system libraries (yaml-cpp, Boost.JSON, spdlog, fmt, utf8proc), so it is no manylinux wheel.
"""
import argparse
import base64
import hashlib
import pathlib
import sys
import sysconfig
import zipfile


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def package_files(stage):
    package = stage / "python/flowline"
    if not (package / "__init__.py").exists():
        sys.exit(f"make_wheel: {package}/__init__.py is missing: run cmake --install with --component python first")
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield f"flowline/{path.relative_to(package).as_posix()}", path
    lib = stage / "lib"
    for path in sorted(lib.rglob("*.so*")):
        # Wheels hold no symlinks, and the loader asks only for a library's SONAME (libflowline.so.0, the
        # link to libflowline.so.0.1.0) and for plugins by their own names: those are the names kept.
        if "cmake" in path.parts or not path.is_file():
            continue
        versioned = ".so." in path.name
        if versioned and not (path.is_symlink() and path.name.count(".so.") == 1 and path.suffix[1:].isdigit()):
            continue
        if not versioned and path.is_symlink():
            continue  # libflowline.so, the link a linker uses
        yield f"flowline/lib/{path.relative_to(lib).as_posix()}", path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--version", required=True)
    parser.add_argument("--torch", required=True, help="the torch version built against (without +local)")
    args = parser.parse_args()
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"{impl}-{impl}-{platform}"
    dist_info = f"flowline-{args.version}.dist-info"
    metadata = "\n".join([
        "Metadata-Version: 2.1", "Name: flowline", f"Version: {args.version}",
        "Summary: flowline's C++ inference flows (LibTorch) from Python: Flow, Document, SentenceEncoder, Reranker",
        f"Requires-Python: =={sys.version_info.major}.{sys.version_info.minor}.*",
        f"Requires-Dist: torch=={args.torch}", "Requires-Dist: numpy", ""])
    wheel = "\n".join(["Wheel-Version: 1.0", "Generator: flowline python/make_wheel.py", "Root-Is-Purelib: false",
                       f"Tag: {tag}", ""])
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"flowline-{args.version}-{tag}.whl"
    records = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for name, path in package_files(args.stage):
            data = path.read_bytes()
            info = zipfile.ZipInfo(name)
            info.external_attr = (path.stat().st_mode & 0o777 | 0o100000) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(record_line(name, data))
        for name, text in ((f"{dist_info}/METADATA", metadata), (f"{dist_info}/WHEEL", wheel)):
            z.writestr(name, text)
            records.append(record_line(name, text.encode()))
        records.append(f"{dist_info}/RECORD,,")
        z.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    print(target)


if __name__ == "__main__":
    main()
