package s3server

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// MinIO is one MinIO server on 127.0.0.1 serving a temp directory: the second S3 implementation of the
// versioned-bucket tests (unlike versitygw's posix backend it keeps a version's Last-Modified when the
// delete marker above it is removed, as AWS does).
type MinIO struct {
	Endpoint string
}

// MinIOBinary finds minio: $CKGUARD_MINIO, the repo's .tools/bin, then $PATH.
func MinIOBinary() (string, error) {
	if p := os.Getenv("CKGUARD_MINIO"); p != "" {
		return p, nil
	}
	if root, err := repoRoot(); err == nil {
		if p := filepath.Join(root, ".tools", "bin", "minio"); fileExists(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	return "", errors.New("minio not found: run `scripts/setup.sh minio` (GOBIN=.tools/bin go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c)")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// StartMinIO runs MinIO on free ports with a fresh data directory and waits until it is live; it is
// stopped at the end of the test. Skips when minio is not installed (also with CI=true).
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	if testing.Short() {
		t.Skip("real S3 server (MinIO) not started in -short mode")
	}
	bin, err := MinIOBinary()
	if err != nil {
		// Optional, also in CI: `make setup-test` does not install it (a 2 GB build); versitygw covers
		// everything else of the versioned-bucket tests.
		t.Skipf("optional second S3 server missing: %v", err)
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	console, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "server", "--address", addr, "--console-address", console, "--quiet", t.TempDir())
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey, "MINIO_BROWSER=off",
		"MINIO_UPDATE=off", "MINIO_CI_CD=1")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start minio: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	m := &MinIO{Endpoint: "http://" + addr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(m.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m
			}
		}
		select {
		case <-done:
			t.Fatalf("minio exited at start: %s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal(fmt.Errorf("minio not live after 60s: %s", logs.String()))
		}
	}
}

// Config is a client configuration for this server.
func (m *MinIO) Config() s3client.Config {
	return s3client.Config{Endpoint: m.Endpoint, Region: Region, PathStyle: true, AccessKey: AccessKey, SecretKey: SecretKey,
		MaxAttempts: 3, MaxBackoff: 200 * time.Millisecond, OpTimeout: 20 * time.Second}
}
