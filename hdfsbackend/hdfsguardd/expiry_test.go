//go:build hdfs

package hdfsguardd_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/types"
)

// TestKerberosTicketExpiry: a guard mount that logged in from a ticket cache holding a short ticket
// (the KDC issues it for ticketLife) deletes an unreferenced file before the end; WARNs ahead of the
// end and at it, naming the cache and KRB5CCNAME; after the end refuses every deletion (EIO, or EPERM
// from the guard) and the files stay on HDFS, although its NameNode connection is still open and the
// NameNode would accept the ticket within the Kerberos clock skew, and its index sync fails naming
// KRB5CCNAME and the fix; once a kinit rewrites the cache it rereads it and, after the next sync,
// deletes again, without a remount. Every wait is for a log line, each bounded.
func TestKerberosTicketExpiry(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	const ticketLife = 90 * time.Second
	c := minidfs.Start(t, minidfs.Options{Kerberos: true, Protection: "privacy"})
	k := c.Kerberos()
	k.Setenv(t)
	storeDir := c.Root() + "/ticket-expiry"
	tr, err := treegen.IncidentTwo(t.TempDir(), time.Now(), treegen.Options{URIPrefix: c.URI(storeDir)})
	if err != nil {
		t.Fatal(err)
	}
	var strays []string // unreferenced: deleted before the end, refused after it, deleted after the renewal
	for _, name := range []string{"before", "expired", "renewed"} {
		s := tr.Purge + "/taskowned/stray-" + name
		if err := tr.Write(s, 64, time.Now().Add(-30*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		strays = append(strays, s)
	}
	var referenced string
	for _, f := range tr.Referenced() {
		if strings.HasPrefix(f, tr.Purge+"/") {
			referenced = f
			break
		}
	}
	if referenced == "" {
		t.Fatal("the incident tree has no referenced file in the old job's folder")
	}
	c.Upload(t, tr.Root, storeDir)
	uri := c.URI(storeDir)

	cc := filepath.Join(t.TempDir(), "krb5cc")
	k.KinitFor(t, minidfs.User, cc, ticketLife)
	end := ticketEnd(t, cc, k.Realm)
	t.Setenv("KRB5CCNAME", "FILE:"+cc)
	logs := &logTail{signal: make(chan struct{}, 1)}
	o := hdfscli.Options{Timeout: 20 * time.Second}
	// Syncs every 5 s (a sync that fails refuses every deletion until one succeeds; the test waits for
	// the one after the renewal). Debug: the "index synced" lines.
	mnt, stop := guardMount(t, t.TempDir(), guardd.Config{StoreDir: uri, Policy: refindex.DefaultPolicy(), SyncInterval: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, o)
	defer stop()

	if left := time.Until(end); left > 20*time.Second {
		if err := os.Remove(filepath.Join(mnt, strays[0])); err != nil {
			t.Errorf("unlink of the unreferenced %s before the ticket's end: %v", strays[0], err)
		}
	} else {
		t.Logf("the mount came up %v before the ticket's end: no deletion before it checked", left)
		strays[0] = ""
	}

	from := 0
	for _, want := range []string{"expires soon", "has expired", "index sync failed"} {
		var line string
		line, from = logs.waitFor(t, want, from, time.Until(end)+2*time.Minute)
		if want != "index sync failed" && !strings.Contains(line, "level=WARN") {
			t.Errorf("the %q line is not a WARN: %s", want, line)
		}
		for _, name := range []string{cc, "KRB5CCNAME", "kinit"} {
			if !strings.Contains(line, name) {
				t.Errorf("the %q line does not name %q: %s", want, name, line)
			}
		}
	}
	if time.Now().Before(end) {
		t.Fatalf("the expiry WARN came before the ticket's end %v", end)
	}
	for _, f := range []string{referenced, strays[1]} {
		err := os.Remove(filepath.Join(mnt, f))
		if !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.EPERM) {
			t.Errorf("unlink of %s after the ticket's end: %v, want EIO or EPERM", f, err)
		}
	}

	k.Kinit(t, minidfs.User, cc) // a day-long ticket into the same file
	_, from = logs.waitFor(t, "reread the renewed ticket cache", from, 2*time.Minute)
	logs.waitFor(t, "index synced", from, 2*time.Minute) // deletions are decided again
	for _, f := range []string{strays[1], strays[2]} {
		if err := os.Remove(filepath.Join(mnt, f)); err != nil {
			t.Errorf("unlink of the unreferenced %s after the renewal: %v", f, err)
		}
	}
	if err := os.Remove(filepath.Join(mnt, referenced)); !errors.Is(err, syscall.EPERM) {
		t.Errorf("unlink of the referenced %s after the renewal: %v, want EPERM", referenced, err)
	}
	stop()

	files := hdfsFilesWith(t, uri, hdfscli.Options{Timeout: 20 * time.Second, Keytab: k.Keytab(minidfs.User), Principal: k.Principal(minidfs.User)})
	if !slices.Contains(files, referenced) {
		t.Errorf("the referenced %s is gone from HDFS", referenced)
	}
	for _, s := range strays {
		if s != "" && slices.Contains(files, s) {
			t.Errorf("the unreferenced %s is still on HDFS", s)
		}
	}
}

// ticketEnd reads when the ticket-granting ticket in the cache file cc ends (whole seconds, as the KDC
// issued it).
func ticketEnd(t *testing.T, cc, realm string) time.Time {
	t.Helper()
	cache, err := credentials.LoadCCache(cc)
	if err != nil {
		t.Fatal(err)
	}
	tgt, ok := cache.GetEntry(types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", realm}})
	if !ok {
		t.Fatalf("no ticket-granting ticket in %s", cc)
	}
	t.Logf("the ticket in %s ends at %v (in %v)", cc, tgt.EndTime, time.Until(tgt.EndTime).Round(time.Second))
	return tgt.EndTime
}

// logTail keeps what a text slog handler writes and wakes waitFor at each write.
type logTail struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	signal chan struct{}
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
	return len(p), nil
}

// waitFor returns the first whole line at or after the offset from that holds want, and the offset
// after it, waiting for it at most bound (then the test fails).
func (l *logTail) waitFor(t *testing.T, want string, from int, bound time.Duration) (string, int) {
	t.Helper()
	deadline := time.After(bound)
	for {
		l.mu.Lock()
		text := l.buf.String()
		l.mu.Unlock()
		for off := from; off < len(text); {
			end := strings.IndexByte(text[off:], '\n')
			if end < 0 {
				break // a line still being written
			}
			line := text[off : off+end]
			off += end + 1
			if strings.Contains(line, want) {
				return line, off
			}
		}
		select {
		case <-l.signal:
		case <-deadline:
			t.Fatalf("no log line with %q within %v; the log:\n%s", want, bound, text)
		}
	}
}
