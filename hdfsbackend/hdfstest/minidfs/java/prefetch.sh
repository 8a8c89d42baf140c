#!/usr/bin/env bash
# Downloads the Maven artifacts of the MiniDFSCluster launcher (Hadoop 3.5.0 client, runtime,
# minicluster and MiniKdc, ~145 MB, plus the build plugins) by building it once online, then proves the offline
# build works as the tests run it (`mvn -o`). For `make setup-hdfs` (Java 17, Maven 3.8).
set -euo pipefail
cd "$(dirname "$0")"
mvn_plain() {
  mvn -B --no-transfer-progress -Dstyle.color=never "$@" 2>&1 | sed -u 's/\x1b\[[0-9;]*m//g'
}
echo "prefetch: MiniDFSCluster launcher (Hadoop 3.5.0)"
mvn_plain -q ${MVN_ARGS:-} package dependency:build-classpath
mvn_plain -o -q ${MVN_ARGS:-} package dependency:build-classpath
echo "prefetch: done (offline build OK)"
