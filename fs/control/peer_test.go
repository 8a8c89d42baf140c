package control

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestUnknownPeerRefused: a request whose peer credentials are missing or unreadable is refused;
// it used to count as uid 0 (root). The socket owner's own uid is served.
func TestUnknownPeerRefused(t *testing.T) {
	s := &Server{methods: map[string]reflect.Value{"Get": reflect.ValueOf(impl{}).MethodByName("Get")}, log: slog.Default()}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want int
	}{
		{"no credentials", context.Background(), http.StatusForbidden},
		{"unreadable credentials", context.WithValue(context.Background(), peerKey{}, -1), http.StatusForbidden},
		{"owner", context.WithValue(context.Background(), peerKey{}, os.Geteuid()), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequestWithContext(tc.ctx, "POST", "/v1/Get", strings.NewReader(`["k", 1]`))
			r.SetPathValue("method", "Get")
			w := httptest.NewRecorder()
			s.handle(w, r)
			if w.Code != tc.want {
				t.Errorf("status %d (%s), want %d", w.Code, strings.TrimSpace(w.Body.String()), tc.want)
			}
		})
	}
}

// TestClientDistrustsForeignServer: a socket served by a process of another user (planted
// in a shared index directory) is not talked to; the error names the uid. The same user's socket in its
// own directory is.
func TestClientDistrustsForeignServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a server as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	dir, err := os.MkdirTemp("", "ckguard-foreign-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "ckguard.sock")
	srv := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/python3", "-c",
		"import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen()\nopen(sys.argv[1]+'.up','w').close()\ntime.sleep(60)", sock)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	for i := 0; ; i++ {
		if _, err := os.Stat(sock + ".up"); err == nil {
			break
		}
		if i == 100 {
			t.Fatal("the foreign server did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = Dial(sock)
	if err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("Dial of a socket served by uid 65534 = %v; want a refusal naming the uid", err)
	}
	// A mount run by that user in its own index directory, which nobody else may write (sudo ckguard
	// orphans against a mount run by the flink user).
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(sock); err != nil {
		t.Fatalf("Dial of the directory owner's socket: %v", err)
	}
}
