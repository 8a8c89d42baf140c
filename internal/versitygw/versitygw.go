// Package versitygw finds and waits for versitygw, the S3 server that the tests and the S3 demo run
// on 127.0.0.1 (its posix backend keeps each object as a plain file). It imports nothing of ckguard.
package versitygw

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// ErrNotFound: no versitygw in $CKGUARD_VERSITYGW, the checkouts' .tools/bin or $PATH.
var ErrNotFound = errors.New("versitygw not found")

// Find returns the versitygw binary: $CKGUARD_VERSITYGW, then .tools/bin/versitygw below each of
// dirs (checkouts, in the order given), then versitygw on $PATH.
func Find(dirs ...string) (string, error) {
	if p := os.Getenv("CKGUARD_VERSITYGW"); p != "" {
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, ".tools", "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", ErrNotFound
}

// ErrExited: the server process ended before it answered its health check.
var ErrExited = errors.New("versitygw exited at start")

// ErrNotHealthy: the health check did not answer 200 within the timeout.
var ErrNotHealthy = errors.New("versitygw not healthy")

// Args is the command line (after the binary) of a versitygw serving dataDir with its posix backend on
// addr (host:port) with one access key pair, quiet, with the /health endpoint WaitHealthy polls; flags are
// further server options (e.g. --keep-alive), placed before the backend name as versitygw requires.
func Args(access, secret, addr, dataDir string, flags ...string) []string {
	a := []string{"--access", access, "--secret", secret, "--port", addr, "--health", "/health", "--quiet"}
	a = append(a, flags...)
	return append(a, "posix", dataDir)
}

// WaitHealthy polls endpoint's /health (versitygw started with --health /health) every 20 ms until it
// answers 200 OK (nil), exited is closed (ErrExited), ctx is done (its error) or timeout has passed
// (ErrNotHealthy). A server that answers is ready: it then serves requests.
func WaitHealthy(ctx context.Context, endpoint string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return ErrNotHealthy
		}
	}
}
