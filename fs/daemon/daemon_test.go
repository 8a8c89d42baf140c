package daemon

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKeepStartingExtendsTheStartTimeout: while the start is under way systemd's NOTIFY_SOCKET receives
// EXTEND_TIMEOUT_USEC with the status at once and then at every interval; after stop nothing more.
func TestKeepStartingExtendsTheStartTimeout(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	stop := KeepStarting(func() string { return "syncing the index" }, 20*time.Millisecond, 3*time.Minute)
	buf := make([]byte, 512)
	for i := range 3 {
		if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("notification %d: %v", i, err)
		}
		if got, want := string(buf[:n]), "EXTEND_TIMEOUT_USEC=180000000\nSTATUS=syncing the index"; got != want {
			t.Fatalf("notification %d = %q, want %q", i, got, want)
		}
	}
	stop()
	stop()
	// At most one notification was on its way when stop returned; then the socket stays quiet.
	for i := 0; ; i++ {
		if err := conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil {
			break
		}
		if i >= 1 || !strings.HasPrefix(string(buf[:n]), "EXTEND_TIMEOUT_USEC=") {
			t.Fatalf("notification after stop: %q", buf[:n])
		}
	}
}
