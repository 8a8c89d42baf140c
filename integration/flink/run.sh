#!/usr/bin/env bash
# Runs a class of the e2e project against one Flink version, building it first if needed (offline
# once prefetch.sh has run). Usage: run.sh FLINK_VERSION_PROFILE MAIN_CLASS [args...]
#   run.sh 1.20 Job --checkpoint-dir file:///tmp/ck --duration 20s
#   run.sh 2.2  ListReferences /tmp/ck/<job>/chk-3/_metadata
#   run.sh 1.20+s3a Job --checkpoint-dir s3a://bucket/ck ...   (adds the optional s3a profile)
#   run.sh 2.2+s3a,forst Job ...                                (two optional profiles)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# VERSION[+VARIANT]: a variant is an optional dependency profile (pom.xml), built into its own folder.
variant=""
case "$1" in *+*) variant="${1#*+}" ;; esac
profile="flink-${1%%+*}"; shift
main="$1"; shift
version="$(sed -n "/<id>${profile}<\/id>/,/<\/profile>/s|.*<flink.version>\(.*\)</flink.version>.*|\1|p" "$here/pom.xml")"
[ -n "$version" ] || { echo "unknown profile $profile" >&2; exit 2; }
# Combined variants (2.2+s3a,forst) build into target/flink-<version>-s3a-forst (pom.xml).
out="$here/target/flink-$version${variant:+-${variant//,/-}}"
if [ ! -f "$out/classpath.txt" ] || [ ! -f "$out/ckguard-flink-e2e-1.0.jar" ] ||
   [ -n "$(find "$here/src" "$here/pom.xml" -newer "$out/ckguard-flink-e2e-1.0.jar" -type f 2>/dev/null | head -1)" ]; then
  (cd "$here" && mvn -o -q -B --no-transfer-progress -Dstyle.color=never -P "$profile${variant:+,$variant}" package dependency:build-classpath ${MVN_ARGS:-}) >&2
fi
# Flink 1.20 on Java 17 needs these (its Kryo/serializers reflect into java.base); harmless on 2.x.
opens=()
for p in java.base/java.lang java.base/java.lang.reflect java.base/java.io java.base/java.net \
         java.base/java.nio java.base/java.text java.base/java.time java.base/java.util \
         java.base/java.util.concurrent java.base/java.util.concurrent.atomic java.base/sun.nio.ch \
         java.base/java.lang.invoke java.base/java.math java.base/java.security java.base/java.util.regex; do
  opens+=(--add-opens "$p=ALL-UNNAMED")
done
exec java ${JAVA_OPTS:--Xmx768m} "${opens[@]}" -Dorg.slf4j.simpleLogger.defaultLogLevel=${FLINK_LOG_LEVEL:-warn} \
  -cp "$out/ckguard-flink-e2e-1.0.jar:$(cat "$out/classpath.txt")" "io.ckguard.flinkjob.$main" "$@"
