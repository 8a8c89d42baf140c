// Package s3server starts a real S3 server (versitygw, posix backend) on 127.0.0.1 for tests, and a fault
// proxy in front of any S3 endpoint (503s, latency, a "killed" mode). Tests skip when versitygw is missing,
// unless CI=true, where a missing prerequisite is a failure.
package s3server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckguard/ckguard/internal/versitygw"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

const (
	AccessKey = "testkey"
	SecretKey = "testsecret"
	Region    = "us-east-1"
)

// Server is one versitygw process serving a temp posix directory.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Addr     string // 127.0.0.1:PORT
	DataDir  string // the posix backend root: DataDir/BUCKET/KEY are plain files
	bin      string
	cmd      *exec.Cmd
	done     chan struct{}
	logs     bytes.Buffer
	t        testing.TB
	backend  []string // posix backend options (after "posix", before the data directory)
}

// Binary finds versitygw: $CKGUARD_VERSITYGW, the repo's .tools/bin, then $PATH.
func Binary() (string, error) {
	var dirs []string
	if root, err := repoRoot(); err == nil {
		dirs = append(dirs, root)
	}
	if p, err := versitygw.Find(dirs...); err == nil {
		return p, nil
	}
	return "", errors.New("versitygw not found: run `make setup` (GOBIN=.tools/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found")
		}
		dir = parent
	}
}

// Require skips the test when prereq is unavailable, or fails it when CI=true.
func Require(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("prerequisite missing in CI: %v", err)
	}
	t.Skipf("prerequisite missing: %v", err)
}

// FakeConfig is the client configuration of a test server at url that checks no credentials (gofakes3,
// httptest wrappers of it): path-style, fixed keys, at most attempts tries per request.
func FakeConfig(url string, attempts int) s3client.Config {
	return s3client.Config{Endpoint: url, Region: "us-east-1", PathStyle: true, AccessKey: "k", SecretKey: "s", MaxAttempts: attempts}
}

// NewBucket creates the bucket loc names on the server of cfg and returns a client of loc.
func NewBucket(t testing.TB, cfg s3client.Config, loc s3client.Location) *s3client.Client {
	t.Helper()
	c, err := s3client.New(context.Background(), cfg, loc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(loc.Bucket)}); err != nil {
		t.Fatal(err)
	}
	return c
}

// RequireFUSE skips a test that mounts a FUSE filesystem in -short mode, and when the machine has no
// /dev/fuse (fails it when CI=true, as Require does).
func RequireFUSE(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("FUSE mount not run in -short mode")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Require(t, err)
	}
}

// FreeAddr returns a free 127.0.0.1 port.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start runs versitygw on a free port with a fresh data dir and waits until /health answers. It is
// stopped at the end of the test.
func Start(t testing.TB) *Server {
	t.Helper()
	return startWith(t, func(s *Server) error { s.DataDir = t.TempDir(); return nil })
}

// startWith starts versitygw on a free port once configure has set the data directory and backend
// options of s; it is stopped at the end of the test.
func startWith(t testing.TB, configure func(*Server) error) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("real S3 server (versitygw) not started in -short mode")
	}
	bin, err := Binary()
	Require(t, err)
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Endpoint: "http://" + addr, Addr: addr, bin: bin, t: t}
	if err := configure(s); err != nil {
		t.Fatal(err)
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() error {
	s.logs.Reset()
	// --keep-alive: by default versitygw answers every request with "Connection: close", which no real S3
	// service does and which made each request a new TCP connection.
	args := versitygw.Args(AccessKey, SecretKey, s.Addr, s.DataDir, "--keep-alive")
	if len(s.backend) > 0 {
		// versitygw takes backend options between the backend name and its data directory.
		args = append(append(args[:len(args)-1:len(args)-1], s.backend...), s.DataDir)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = &s.logs, &s.logs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	switch err := versitygw.WaitHealthy(context.Background(), s.Endpoint, s.done, 20*time.Second); {
	case err == nil:
		return nil
	case errors.Is(err, versitygw.ErrExited):
		return fmt.Errorf("versitygw exited at start: %s", s.logs.String())
	}
	s.kill(syscall.SIGKILL)
	return fmt.Errorf("versitygw not healthy after 20s: %s", s.logs.String())
}

func (s *Server) kill(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Stop terminates the server gracefully (SIGTERM).
func (s *Server) Stop() { s.kill(syscall.SIGTERM) }

// Kill terminates the server abruptly (SIGKILL), as a crash would.
func (s *Server) Kill() { s.kill(syscall.SIGKILL) }

// Restart starts the server again on the same address and data directory.
func (s *Server) Restart() error {
	s.kill(syscall.SIGTERM)
	return s.start()
}

// Config is a client configuration for this server.
func (s *Server) Config() s3client.Config {
	return s3client.Config{Endpoint: s.Endpoint, Region: Region, PathStyle: true, AccessKey: AccessKey, SecretKey: SecretKey,
		MaxAttempts: 3, MaxBackoff: 200 * time.Millisecond, OpTimeout: 20 * time.Second}
}

// Bucket creates a bucket and returns its name.
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	c, err := s3client.New(context.Background(), s.Config(), s3client.Location{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// AWSEnv is the environment for /usr/bin/aws against this server (no config files are read).
func AWSEnv() []string {
	return append(os.Environ(), "AWS_ACCESS_KEY_ID="+AccessKey, "AWS_SECRET_ACCESS_KEY="+SecretKey,
		"AWS_DEFAULT_REGION="+Region, "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_PAGER=", "AWS_EC2_METADATA_DISABLED=true")
}

// AWSCLI is Debian's aws-cli v2. A pyenv shim may shadow `aws`, so the path is fixed.
const AWSCLI = "/usr/bin/aws"

// AWS runs /usr/bin/aws against endpoint and returns its combined output; failure fails the test.
func AWS(t testing.TB, endpoint string, args ...string) string {
	t.Helper()
	if _, err := os.Stat(AWSCLI); err != nil {
		Require(t, fmt.Errorf("%s (Debian awscli) missing: %w", AWSCLI, err))
	}
	cmd := exec.Command(AWSCLI, append([]string{"--endpoint-url", endpoint}, args...)...)
	cmd.Env = AWSEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
