"""The cost of verifying a token cache when it is opened: the streaming checksum over a cache file.

    python benchmarks/cache_checksum.py [--tokens 120000000] [--itemsize 2] [--repeats 3] [--dir /tmp]

Writes a random file the size of a cache of ``--tokens`` ids (WikiText-103's train split is about 120M
GPT-2 tokens, stored as uint16: 240 MB), times ``file_checksum`` on it (the first pass may read from disk,
the later ones from the page cache, as a cache opened again soon after does), and deletes it. hashlib's
other hashes are timed on the same bytes in memory for comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time

from tra_attn.data.text.corpus import CHECKSUM, file_checksum


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=120_000_000, help="ids in the cache file")
    parser.add_argument("--itemsize", type=int, default=2, help="bytes per id: 2 (uint16) or 4 (uint32)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write the file (default: the temp folder)")
    args = parser.parse_args()
    size = args.tokens * args.itemsize
    fd, path = tempfile.mkstemp(prefix="cache_checksum.", suffix=".bin", dir=args.dir)
    try:
        with os.fdopen(fd, "wb") as f:
            for start in range(0, size, 1 << 26):
                f.write(os.urandom(min(1 << 26, size - start)))
        times = []
        for _ in range(args.repeats):
            begin = time.perf_counter()
            file_checksum(path)
            times.append(time.perf_counter() - begin)
        print(f"file_checksum ({CHECKSUM}) of {size / 1e6:.0f} MB: " + ", ".join(f"{t:.2f} s" for t in times))
        print(f"  {size / 1e6 / min(times):.0f} MB/s at best")
        with open(path, "rb") as f:
            data = f.read(min(size, 1 << 28))
        for name in ("sha256", "blake2b", "sha1", "md5"):
            begin = time.perf_counter()
            hashlib.new(name, data)
            print(f"  hashlib {name:8} in memory: {len(data) / 1e6 / (time.perf_counter() - begin):.0f} MB/s")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
