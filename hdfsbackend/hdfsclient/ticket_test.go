package hdfsclient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"
	"github.com/jcmturner/gokrb5/v8/credentials"
)

// TestWatchTicket: a ticket-cache login rereads its cache from ticketWarnLead before the end (15
// minutes, a sixth of the time left for short tickets) every ticketPoll; not renewed, it WARNs ahead
// of the end and at it, each naming the cache, KRB5CCNAME and the fixes, and keeps rereading; a
// renewed cache is reloaded; a failing reload is WARNed once; a stopped watch says nothing more.
func TestWatchTicket(t *testing.T) {
	start := time.Now().Truncate(time.Second)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name      string
		left      time.Duration
		cacheEnd  time.Duration // a cache file ending this long after start; 0: no file
		reloadErr error
		sleeps    []time.Duration // the last one stops the watch
		logs      []string
		reloads   int
	}{
		{"never renewed, six-minute ticket", 6 * time.Minute, 0, nil,
			append([]time.Duration{5 * time.Minute}, slices.Repeat([]time.Duration{12 * time.Second}, 6)...),
			[]string{"WARN expires soon", "WARN has expired"}, 0},
		{"never renewed, day-long ticket", 24 * time.Hour, 0, nil,
			[]time.Duration{24*time.Hour - 15*time.Minute, time.Minute},
			[]string{"WARN expires soon"}, 0},
		{"stopped before the first reread", time.Hour, 0, nil, []time.Duration{50 * time.Minute}, nil, 0},
		{"renewed outside", time.Hour, 25 * time.Hour, nil,
			[]time.Duration{50 * time.Minute, 25*time.Hour - 50*time.Minute - 15*time.Minute},
			[]string{"INFO reread the renewed ticket cache"}, 1},
		{"renewed cache that cannot be used", time.Hour, 25 * time.Hour, errors.New("KDC unreachable"),
			[]time.Duration{50 * time.Minute, time.Minute, time.Minute},
			[]string{"WARN could not be used", "WARN expires soon"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := missing
			if tc.cacheEnd > 0 {
				cc = filepath.Join(t.TempDir(), "krb5cc")
				writeCCache(t, cc, "flink", "EX.COM", start.Add(tc.cacheEnd))
			}
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			now := start
			var slept []time.Duration
			reloads := 0
			reload := func(*credentials.CCache) error { reloads++; return tc.reloadErr }
			watchTicket(log, cc, start.Add(tc.left), reload, func() time.Time { return now }, func(d time.Duration) bool {
				slept = append(slept, d)
				now = now.Add(d)
				return len(slept) < len(tc.sleeps)
			})
			if !slices.Equal(slept, tc.sleeps) {
				t.Errorf("slept %v, want %v", slept, tc.sleeps)
			}
			if reloads != tc.reloads {
				t.Errorf("%d reloads, want %d", reloads, tc.reloads)
			}
			var lines []string
			if buf.Len() > 0 {
				lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
			}
			if len(lines) != len(tc.logs) {
				t.Fatalf("logged %d lines, want %d: %s", len(lines), len(tc.logs), buf.String())
			}
			for i, w := range tc.logs {
				level, msg, _ := strings.Cut(w, " ")
				wants := []string{"level=" + level, msg, cc}
				if level == "WARN" {
					wants = append(wants, "KRB5CCNAME", "kinit -R", "--hdfs-keytab")
				}
				for _, want := range wants {
					if !strings.Contains(lines[i], want) {
						t.Errorf("line %d %q does not name %q", i, lines[i], want)
					}
				}
			}
		})
	}
}

func TestTicketWarnLead(t *testing.T) {
	for left, want := range map[time.Duration]time.Duration{
		10 * time.Hour: 15 * time.Minute, 90 * time.Minute: 15 * time.Minute, time.Hour: 10 * time.Minute, 0: 0, -time.Minute: -10 * time.Second,
	} {
		if got := ticketWarnLead(left); got != want {
			t.Errorf("ticketWarnLead(%v) = %v, want %v", left, got, want)
		}
	}
}

// writeCCache writes a version-4 file ticket cache holding one ticket-granting ticket of user@realm
// valid until end (its ticket bytes are not a real ticket: only the cache's times are read).
func writeCCache(t *testing.T, path, user, realm string, end time.Time) {
	t.Helper()
	var b []byte
	u16 := func(v uint16) { b = binary.BigEndian.AppendUint16(b, v) }
	u32 := func(v uint32) { b = binary.BigEndian.AppendUint32(b, v) }
	data := func(s string) { u32(uint32(len(s))); b = append(b, s...) }
	princ := func(typ uint32, realm string, names ...string) {
		u32(typ)
		u32(uint32(len(names)))
		data(realm)
		for _, n := range names {
			data(n)
		}
	}
	u16(0x0504)
	u16(0) // no header fields
	princ(1, realm, user)
	princ(1, realm, user)
	princ(2, realm, "krbtgt", realm)
	u16(18) // key type, then the key
	data(strings.Repeat("k", 32))
	for _, ts := range []time.Time{end.Add(-time.Hour), end.Add(-time.Hour), end, end.Add(time.Hour)} {
		u32(uint32(ts.Unix())) // auth, start, end, renew till
	}
	b = append(b, 0)     // not a session-key ticket
	u32(0)               // flags
	u32(0)               // addresses
	u32(0)               // auth data
	data("not-a-ticket") // ticket
	data("")             // second ticket
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestExpiredTicketCacheFailsAtStart: a ticket cache whose ticket has ended stops the login at once,
// naming the cache, KRB5CCNAME and the fixes.
func TestExpiredTicketCacheFailsAtStart(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "krb5.conf")
	if err := os.WriteFile(conf, []byte("[libdefaults]\n  default_realm = EX.COM\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := filepath.Join(dir, "krb5cc")
	writeCCache(t, cc, "flink", "EX.COM", time.Now().Add(-time.Minute))
	_, _, err := kerberosClient(Kerberos{Enabled: true, CCache: "FILE:" + cc, Krb5Conf: conf})
	if !errors.Is(err, errTicketExpired) {
		t.Fatalf("login from an expired ticket cache: %v, want errTicketExpired", err)
	}
	for _, want := range []string{cc, "KRB5CCNAME", "kinit -R", "--hdfs-keytab"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
}

// TestReloadRefusesAnotherPrincipal: a cache rewritten by a kinit as someone else is not used (the
// mount never changes whom it acts as).
func TestReloadRefusesAnotherPrincipal(t *testing.T) {
	cc := filepath.Join(t.TempDir(), "krb5cc")
	writeCCache(t, cc, "mallory", "EX.COM", time.Now().Add(time.Hour))
	cache, err := credentials.LoadCCache(cc)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{}
	err = c.reload(hdfs.ClientOptions{}, krbLogin{ccache: cc, principal: "flink@EX.COM"}, cache)
	if err == nil || !strings.Contains(err.Error(), "mallory@EX.COM") || !strings.Contains(err.Error(), "flink@EX.COM") {
		t.Errorf("reload from another principal's cache: %v", err)
	}
}

// TestExpiredTicketRefusesEveryCall: once the ticket of a ticket-cache login has ended (and no renewed
// cache was reloaded), every call of the client fails before it reaches the library (the generation
// here has none: a call that reached it would panic), as EIO and "unavailable" so that a decision
// refuses, naming the cache, KRB5CCNAME and the fixes; before the end the generation is handed out.
func TestExpiredTicketRefusesEveryCall(t *testing.T) {
	ctx := t.Context()
	end := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	now := end.Add(-time.Second)
	cc := "/run/user/1000/krb5cc_flink"
	c := &Client{gen: &generation{ticketEnd: end}, ccache: cc, now: func() time.Time { return now }}
	g, err := c.acquire("stat", "/")
	if err != nil {
		t.Fatalf("a second before the end: %v", err)
	}
	g.release()

	for _, after := range []time.Duration{0, time.Hour} {
		now = end.Add(after)
		calls := map[string]func() error{
			"stat":     func() error { _, err := c.Stat(ctx, "/a"); return err },
			"list":     func() error { return c.List(ctx, "/a", func([]FileInfo) error { return nil }) },
			"open":     func() error { _, err := c.Open(ctx, "/a"); return err },
			"create":   func() error { _, err := c.Create(ctx, "/a", 0o644); return err },
			"append":   func() error { _, err := c.Append(ctx, "/a"); return err },
			"mkdir":    func() error { return c.Mkdir(ctx, "/a", 0o755) },
			"mkdirAll": func() error { return c.MkdirAll(ctx, "/a", 0o755) },
			"remove":   func() error { return c.Remove(ctx, "/a") },
			"rename":   func() error { return c.Rename(ctx, "/a", "/b") },
			"setTimes": func() error { return c.Chtimes(ctx, "/a", end) },
			"defaults": func() error { _, err := c.Defaults(ctx); return err },
		}
		for name, call := range calls {
			err := call()
			if Errno(err) != syscall.EIO || !Unavailable(err) || !errors.Is(err, errTicketExpired) {
				t.Errorf("%s %v after the end: %v (errno %v), want EIO, unavailable, errTicketExpired", name, after, err, Errno(err))
				continue
			}
			for _, want := range []string{"KRB5CCNAME=" + cc, "kinit", "--hdfs-keytab"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %q does not name %q", name, err, want)
				}
			}
		}
	}
}
