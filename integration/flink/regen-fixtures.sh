#!/usr/bin/env bash
# Regenerates testdata/flink/<flink-version>/<scenario>/ from real Flink runs (MiniCluster, RocksDB
# incremental checkpoints). Offline after prefetch.sh. Takes ~5 minutes for all versions.
#
#   integration/flink/regen-fixtures.sh [1.20 2.0 2.2]
#
# Every scenario writes into its own store root BASE/<version>/<scenario>/store, where
# BASE=/tmp/ckguard-fixtures (fixed, because Flink writes absolute file: URIs into _metadata).
# After the runs, the tree is copied to testdata/flink/<version>/<scenario>/store with every
# _metadata kept byte for byte and every other file replaced by an empty placeholder (the layout
# is what the tests need; the state bytes are not). Next to each _metadata, expected-references.json
# is what Flink's own Checkpoints.loadCheckpointMetadata reports (ListReferences).
# Prefix map for the index: file:/tmp/ckguard-fixtures/<v>/<scenario>/store=<repo>/testdata/flink/<v>/<scenario>/store
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BASE=/tmp/ckguard-fixtures
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(1.20 2.0 2.2)

job() { # version store-uri logfile args... ; prints the last completed checkpoint folder (local path)
  local v="$1" log="$2"; shift 2
  "$here/run.sh" "$v" Job --rate 2000 --value-bytes 200 --keys 20000 "$@" >"$log" 2>&1 || {
    echo "job failed, see $log" >&2; tail -5 "$log" >&2; exit 1; }
  grep -q 'CKGUARD-EVENT job-stopped' "$log" || { echo "job did not stop cleanly: $log" >&2; exit 1; }
  local p; p="$(grep 'CKGUARD-EVENT checkpoint-completed' "$log" | tail -1 | sed 's/.* path=//')"
  p="${p#file://}"; echo "${p#file:}"
}

for v in "${versions[@]}"; do
  root="$BASE/$v"
  rm -rf "$root"; mkdir -p "$root"
  fv="$(sed -n "/<id>flink-${v}<\/id>/,/<\/profile>/s|.*<flink.version>\(.*\)</flink.version>.*|\1|p" "$here/pom.xml")"
  echo "== Flink $fv"

  # incremental: job A, then LEGACY (job C) and CLAIM (job B) restores from A's latest checkpoint, in
  # one store, so B's and C's checkpoints reference SSTs under A's shared/. LEGACY runs first:
  # CLAIM hands A's checkpoint to B, whose subsumption then deletes it.
  s="$root/incremental/store"; mkdir -p "$s"
  a="$(job "$v" "$root/incremental/job-a.log" --checkpoint-dir "file://$s" --stop-after-checkpoints 4)"
  job "$v" "$root/incremental/job-c-legacy.log" --checkpoint-dir "file://$s" --restore "$a" --claim-mode LEGACY --stop-after-checkpoints 3 >/dev/null
  job "$v" "$root/incremental/job-b-claim.log" --checkpoint-dir "file://$s" --restore "$a" --claim-mode CLAIM --stop-after-checkpoints 3 >/dev/null

  # file-merging: job F with file merging, then job G restored from F in CLAIM (segments of F's
  # physical files referenced by G).
  s="$root/file-merging/store"; mkdir -p "$s"
  f="$(job "$v" "$root/file-merging/job-f.log" --checkpoint-dir "file://$s" --file-merging --stop-after-checkpoints 4)"
  job "$v" "$root/file-merging/job-g-claim.log" --checkpoint-dir "file://$s" --file-merging --restore "$f" --claim-mode CLAIM --stop-after-checkpoints 3 >/dev/null

  # changelog: job L with the changelog state backend, DSTL under the store (store/dstl), then job M
  # restored from L in CLAIM (changelog cannot restore in NO_CLAIM).
  s="$root/changelog/store"; mkdir -p "$s/dstl"
  l="$(job "$v" "$root/changelog/job-l.log" --checkpoint-dir "file://$s" --changelog --dstl-path "file://$s/dstl" --stop-after-checkpoints 6)"
  job "$v" "$root/changelog/job-m-claim.log" --checkpoint-dir "file://$s" --changelog --dstl-path "file://$s/dstl" --restore "$l" --claim-mode CLAIM --stop-after-checkpoints 3 >/dev/null

  out="$repo/testdata/flink/$v"
  rm -rf "$out"; mkdir -p "$out"
  mapfile -t metas < <(find "$root" -name _metadata -path '*/store/*' | sort)
  "$here/run.sh" "$v" ListReferences "${metas[@]}" >"$root/references.jsonl"
  for sc in incremental file-merging changelog; do
    (cd "$root/$sc" && find store -type d) | while read -r d; do mkdir -p "$out/$sc/$d"; done
    (cd "$root/$sc" && find store -type f) | while read -r f; do
      if [ "$(basename "$f")" = _metadata ]; then cp "$root/$sc/$f" "$out/$sc/$f"; else : >"$out/$sc/$f"; fi
    done
    cp "$root/$sc"/*.log "$out/$sc/" 2>/dev/null || true
    # Keep only the event lines of the logs: they say which job is which.
    for lg in "$out/$sc"/*.log; do grep 'CKGUARD-EVENT' "$lg" >"${lg%.log}.events" || true; rm -f "$lg"; done
  done
  python3 - "$root" "$out" "$fv" <<'PY'
import json, os, sys
root, out, fv = sys.argv[1:]
dec = json.JSONDecoder()
text = open(os.path.join(root, "references.jsonl")).read()
i = 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    obj, i = dec.raw_decode(text, i)
    rel = os.path.relpath(obj["metadata"], root)
    obj["metadata"] = "file:" + obj["metadata"]
    dst = os.path.join(out, os.path.dirname(rel), "expected-references.json")
    with open(dst, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
PY
  echo "   $(find "$out" -name _metadata | wc -l) _metadata, $(du -sh "$out" | cut -f1)"
done
