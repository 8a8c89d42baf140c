package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckguard/ckguard/internal/versitygw"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// The demo's S3 server: versitygw (the test S3 server `make setup` installs) with its posix backend,
// on 127.0.0.1 only, with throw-away credentials. Objects are plain files under data/BUCKET/, so the
// demo writes the store there directly (with backdated mtimes, which versitygw reports as
// Last-Modified) and reads the truth back from the same files.
const (
	s3Bucket = "ckguard-demo"
	s3Access = "ckguard-demo"
	s3Secret = "ckguard-demo-secret"
	s3Region = "us-east-1"
)

type s3Server struct {
	cmd      *exec.Cmd
	endpoint string
	data     string
	log      string
	exited   chan struct{}
}

// versitygwBinary finds versitygw: $CKGUARD_VERSITYGW, .tools/bin of the checkout (found from the
// working directory or next to bin/ckguard), then $PATH.
func versitygwBinary(exe string) (string, error) {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	dirs = append(dirs, filepath.Dir(filepath.Dir(exe)))
	if p, err := versitygw.Find(dirs...); err == nil {
		return p, nil
	}
	return "", errors.New("versitygw (the S3 server the S3 demo runs on 127.0.0.1) is not installed; `make demo` does not install it: run `make setup-test` in the checkout first (it puts versitygw in .tools/bin), or set CKGUARD_VERSITYGW to a versitygw binary")
}

// s3Env is the environment of ckguard children talking to the demo server: its credentials and no
// shared config files, so the operator's own AWS profile is never used.
func s3Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s3Access, "AWS_SECRET_ACCESS_KEY=" + s3Secret, "AWS_REGION=" + s3Region,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
}

func (s *s3Server) flags() []string {
	return []string{"--s3-endpoint", s.endpoint, "--s3-path-style", "--s3-region", s3Region}
}

// startS3 starts versitygw on a free 127.0.0.1 port and creates the bucket.
func startS3(ctx context.Context, exe, dir string) (*s3Server, error) {
	bin, err := versitygwBinary(exe)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s := &s3Server{endpoint: "http://" + addr, data: filepath.Join(dir, "s3-data"), log: filepath.Join(dir, "versitygw.log"), exited: make(chan struct{})}
	if err := os.MkdirAll(s.data, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(bin, versitygw.Args(s3Access, s3Secret, addr, s.data)...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	switch err := versitygw.WaitHealthy(ctx, s.endpoint, s.exited, 20*time.Second); {
	case errors.Is(err, versitygw.ErrExited):
		return nil, fmt.Errorf("versitygw exited at start:\n%s", tail(s.log, 10))
	case errors.Is(err, versitygw.ErrNotHealthy):
		s.stop()
		return nil, fmt.Errorf("versitygw not healthy on %s after 20s:\n%s", addr, tail(s.log, 10))
	case err != nil:
		s.stop()
		return nil, err
	}
	c, err := s3client.New(ctx, s3client.Config{Endpoint: s.endpoint, Region: s3Region, PathStyle: true,
		AccessKey: s3Access, SecretKey: s3Secret, MaxAttempts: 3}, s3client.Location{Bucket: s3Bucket})
	if err == nil {
		_, err = c.API().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s3Bucket)})
	}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("create bucket %s on %s: %w", s3Bucket, s.endpoint, err)
	}
	return s, nil
}

func (s *s3Server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// isServerFile reports files versitygw keeps for itself inside a bucket directory.
func isServerFile(key string) bool {
	return strings.HasPrefix(key, ".sgwtmp") || strings.Contains(key, "/.sgwtmp")
}
