#!/usr/bin/env python3
"""Split a process's memory by mapping kind from /proc/PID/smaps: the index's badger files (.sst
tables, .vlog value logs, .mem memtable logs), other files, anonymous memory. Prints one line per kind
(Size = mapped, Rss = resident, both MiB) and, with -v, the files of each kind by resident size.

  smaps-split.py PID [-v]
"""
import collections
import os
import sys


def kind(path):
    for ext in (".sst", ".vlog", ".mem"):
        if path.endswith(ext):
            return ext
    if path.startswith("/") and not path.startswith("/dev/"):
        return "file"
    return "anon"


def main():
    pid = sys.argv[1]
    verbose = "-v" in sys.argv[2:]
    size = collections.Counter()
    rss = collections.Counter()
    files = collections.defaultdict(lambda: [0, 0])
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                path = fields[5] if len(fields) > 5 else ""
                cur = path
                continue
            if fields[0] == "Size:":
                size[kind(cur)] += int(fields[1])
                files[cur][0] += int(fields[1])
            elif fields[0] == "Rss:":
                rss[kind(cur)] += int(fields[1])
                files[cur][1] += int(fields[1])
    for k in (".sst", ".vlog", ".mem", "file", "anon"):
        n = sum(1 for p in files if p and kind(p) == k) if k not in ("anon",) else 0
        print(f"{k:5s} files {n:5d}  size {size[k] // 1024:7d} MiB  rss {rss[k] // 1024:7d} MiB")
    if verbose:
        for p, (s, r) in sorted(files.items(), key=lambda e: -e[1][1])[:40]:
            print(f"  {r // 1024:6d} / {s // 1024:6d} MiB  {os.path.basename(p) or '[anon]'}")


if __name__ == "__main__":
    main()
