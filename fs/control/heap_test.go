package control

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// The heap profile comes over the control socket as a profile `go tool pprof` reads, with this
// process's allocations in it.
func TestHeapProfileParses(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to read the profile with")
	}
	c := serveAndDial(t, impl{}, reflect.TypeFor[api]())
	keep := make([][]byte, 0, 64)
	for range 64 {
		keep = append(keep, make([]byte, 1<<20)) // 64 MiB in use, sampled for sure
	}
	var prof bytes.Buffer
	if err := c.Heap(context.Background(), &prof, true); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(keep) // in use while the profile was taken
	f := filepath.Join(t.TempDir(), "heap.pb.gz")
	if err := os.WriteFile(f, prof.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goBin, "tool", "pprof", "-top", "-sample_index=inuse_space", f).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "TestHeapProfileParses") {
		t.Fatalf("the profile does not show the test's 64 MiB:\n%s", out)
	}
}

// Only root and the mount's own user get the profile: another uid, and a caller whose credentials
// cannot be read, are refused before anything is collected.
func TestHeapProfileRefusesOtherUsers(t *testing.T) {
	s := &Server{log: slog.Default()}
	other := 65534
	if os.Geteuid() == other {
		other = 65533
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want int
	}{
		{"no credentials", context.Background(), http.StatusForbidden},
		{"unreadable credentials", context.WithValue(context.Background(), peerKey{}, -1), http.StatusForbidden},
		{"another user", context.WithValue(context.Background(), peerKey{}, other), http.StatusForbidden},
		{"owner", context.WithValue(context.Background(), peerKey{}, os.Geteuid()), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequestWithContext(tc.ctx, "GET", heapPath+"?gc=0", nil)
			w := httptest.NewRecorder()
			s.heap(w, r)
			if w.Code != tc.want {
				t.Errorf("status %d (%.200s), want %d", w.Code, w.Body.String(), tc.want)
			}
			if tc.want != http.StatusOK && w.Body.Len() > 0 && !strings.Contains(w.Body.String(), "error") {
				t.Errorf("a refused caller got a body that is not an error: %.100q", w.Body.String())
			}
		})
	}
}

// As root: a process of an unprivileged user cannot get the profile through the socket at all.
func TestHeapProfileUnprivilegedProcessRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	for _, tool := range []string{"setpriv", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the folders are not what stops them: the socket is
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, SocketName)
	s, err := Listen(sock, impl{}, reflect.TypeFor[api](), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", sock, "http://ckguard"+heapPath).CombinedOutput()
	if err == nil && strings.TrimSpace(string(out)) == "200" {
		t.Fatalf("uid 65534 got the heap profile: %s", out)
	}
	t.Logf("uid 65534: %v %s", err, out)
}
