#!/usr/bin/env bash
# Downloads every Maven artifact the e2e tests and regen-fixtures.sh need (all Flink profiles, build
# plugins), by building the project once per profile online. Afterwards everything runs with `mvn -o`.
# For `make setup` (needs Java 17 + Maven 3.8; Maven Central reachable).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
profiles=("$@")
# Plain output for logs: batch mode, no download progress, no colours. Maven 3.8 still writes ANSI
# reset codes with -B -q, so they are stripped as well.
mvn_plain() {
  mvn -B --no-transfer-progress -Dstyle.color=never "$@" 2>&1 | sed -u 's/\x1b\[[0-9;]*m//g'
}
# VERSION[+VARIANT] as for run.sh: 1.20+s3a adds the optional s3a profile (Hadoop S3A: ~55 MB more in ~/.m2),
# 2.2+forst and 2.3+forst the ForSt state backend, 2.2+s3a,forst both (flink-statebackend-forst and its
# forstjni, ~40 MB; Maven Central has no flink-statebackend-forst 2.0.1, the version of the 2.0 profile).
[ ${#profiles[@]} -gt 0 ] || profiles=(1.20 2.0 2.2 2.3 1.20+s3a 2.2+forst 2.3+forst 2.2+s3a,forst)
for v in "${profiles[@]}"; do
  variant=""
  case "$v" in *+*) variant="${v#*+}" ;; esac
  p="flink-${v%%+*}${variant:+,$variant}"
  echo "prefetch: profiles $p"
  (cd "$here" && mvn_plain -q ${MVN_ARGS:-} -P "$p" package dependency:build-classpath)
done
# Prove the offline build works, as the tests run it.
first="${profiles[0]}"
case "$first" in *+*) first="${first%%+*},${first#*+}" ;; esac
(cd "$here" && mvn_plain -o -q ${MVN_ARGS:-} -P "flink-$first" package dependency:build-classpath)
echo "prefetch: done (offline build OK)"
