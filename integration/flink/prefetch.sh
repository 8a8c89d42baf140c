#!/usr/bin/env bash
# Downloads every Maven artifact the e2e tests and regen-fixtures.sh need (all Flink profiles, build
# plugins), by building the project once per profile online. Afterwards everything runs with `mvn -o`.
# For `make setup` (needs Java 17 + Maven 3.8; Maven Central reachable).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
profiles=("$@")
[ ${#profiles[@]} -gt 0 ] || profiles=(1.20 2.0 2.2)
for v in "${profiles[@]}"; do
  echo "prefetch: Flink profile flink-$v"
  (cd "$here" && mvn -B -q ${MVN_ARGS:-} -P "flink-$v" package dependency:build-classpath)
done
# Prove the offline build works, as the tests run it.
(cd "$here" && mvn -o -B -q ${MVN_ARGS:-} -P "flink-${profiles[0]}" package dependency:build-classpath)
echo "prefetch: done (offline build OK)"
