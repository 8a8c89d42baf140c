package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestE2ES3 is scenario (vi) on a real S3 server (versitygw on 127.0.0.1): the store is a bucket,
// mounted with `ckguard mount --store s3://…`, and Flink writes its checkpoints into it through that
// mount. Maven Central as reachable here serves neither flink-s3-fs-hadoop nor flink-s3-fs-presto, so
// Flink's own S3 file systems cannot be put on the classpath; the checkpoints still end up as S3
// objects (uploaded by the mount), and the cleanup, the failover and the restores run exactly as in
// the local scenario. The posix backend keeps each object as a plain file, which is how the test
// checks the bucket without going through ckguard.
func TestE2ES3(t *testing.T) {
	e2eRequire(t)
	for _, v := range flinkVersions() {
		for _, direct := range []bool{false, true} {
			name := v + "/incremental/CLAIM/flink-through-mount"
			if direct {
				// Flink writes the objects into the server's posix backend folder (they are S3
				// objects at once); the guard still sees them only through S3, and the cleanup runs
				// through the S3 mount.
				name = v + "/incremental/CLAIM/flink-into-bucket-folder"
			}
			t.Run(name, func(t *testing.T) {
				e2eRequireFUSE(t)
				srv := s3server.Start(t)
				bucket := srv.Bucket(t, "checkpoints")
				for k, val := range map[string]string{"AWS_ACCESS_KEY_ID": s3server.AccessKey,
					"AWS_SECRET_ACCESS_KEY": s3server.SecretKey, "AWS_REGION": s3server.Region,
					"AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
					"AWS_EC2_METADATA_DISABLED": "true"} {
					t.Setenv(k, val)
				}
				flags := []string{"--s3-endpoint", srv.Endpoint, "--s3-path-style", "--s3-region", s3server.Region}
				local := filepath.Join(srv.DataDir, bucket, "flink")
				if err := os.MkdirAll(local, 0o755); err != nil {
					t.Fatal(err)
				}
				g := startGuardMountOn(t, local, "s3://"+bucket+"/flink", flags, direct)
				guardedScenarioOn(t, g, v, "CLAIM", jobOpts{})
			})
		}
	}
}
