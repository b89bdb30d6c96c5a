# Reads an embedding file written by flowline with the standard tools (numpy.load or
# safetensors.numpy.load_file) and compares it, bit for bit, with the raw bytes the test wrote from memory,
# and the sidecar's ids with the expected ids. Exit 0: equal; 1: different (the reason on stderr);
# 77: numpy or safetensors is missing.
import json
import sys

try:
    import numpy as np
    from safetensors.numpy import load_file
except ImportError as e:
    print(f"missing python package: {e.name}", file=sys.stderr)
    sys.exit(77)


def main():
    path, expected_raw, dtype, rows, dim, sidecar, ids_file = sys.argv[1:8]
    rows, dim = int(rows), int(dim)
    if path.endswith(".npy"):
        array = np.load(path)
    else:
        tensors = load_file(path)
        if list(tensors) != ["embedding"]:
            sys.exit(f"tensors {list(tensors)}, expected ['embedding']")
        array = tensors["embedding"]
    expected = np.fromfile(expected_raw, dtype=np.dtype(dtype)).reshape(rows, dim)
    if array.dtype != expected.dtype or array.shape != expected.shape:
        sys.exit(f"got {array.dtype} {array.shape}, expected {expected.dtype} {expected.shape}")
    if array.tobytes() != expected.tobytes():
        sys.exit("the values differ from the embeddings in memory")
    with open(sidecar, encoding="utf-8") as f:
        ids = [json.loads(line)["id"] for line in f]
    with open(ids_file, encoding="utf-8") as f:
        want = f.read().split()
    if ids != want:
        sys.exit(f"sidecar ids differ: {len(ids)} ids, expected {len(want)}")
    print(f"OK {array.dtype} {array.shape}")


main()
