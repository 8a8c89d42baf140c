package hdfsclient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWatchTicket: a ticket-cache login WARNs ahead of its ticket's end (15 minutes, a sixth of the
// time left for short tickets) and again at the end, each naming the cache, KRB5CCNAME and the fixes;
// a stopped watch says nothing more.
func TestWatchTicket(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		left   time.Duration
		stopAt int // sleeps allowed before the watch is stopped (-1: never)
		sleeps []time.Duration
		warns  []string
	}{
		{"day-long ticket", 24 * time.Hour, -1, []time.Duration{24*time.Hour - 15*time.Minute, 15 * time.Minute}, []string{"expires soon", "has expired"}},
		{"one-minute ticket", time.Minute, -1, []time.Duration{50 * time.Second, 10 * time.Second}, []string{"expires soon", "has expired"}},
		{"stopped before the first", time.Hour, 0, []time.Duration{50 * time.Minute}, nil},
		{"stopped before the end", time.Hour, 1, []time.Duration{50 * time.Minute, 10 * time.Minute}, []string{"expires soon"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			now := start
			var slept []time.Duration
			watchTicket(log, "/tmp/missing-ccache", start.Add(tc.left), func() time.Time { return now }, func(d time.Duration) bool {
				slept = append(slept, d)
				if tc.stopAt >= 0 && len(slept) > tc.stopAt {
					return false
				}
				now = now.Add(d)
				return true
			})
			if len(slept) != len(tc.sleeps) {
				t.Fatalf("slept %v, want %v", slept, tc.sleeps)
			}
			for i := range slept {
				if slept[i] != tc.sleeps[i] {
					t.Errorf("sleep %d = %v, want %v", i, slept[i], tc.sleeps[i])
				}
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(tc.warns) == 0 {
				if buf.Len() > 0 {
					t.Errorf("logged after the stop: %s", buf.String())
				}
				return
			}
			if len(lines) != len(tc.warns) {
				t.Fatalf("logged %d lines, want %d: %s", len(lines), len(tc.warns), buf.String())
			}
			for i, w := range tc.warns {
				for _, want := range []string{"level=WARN", w, "/tmp/missing-ccache", "KRB5CCNAME", "kinit -R", "--hdfs-keytab"} {
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

// TestWatchTicketSeesOutsideRenewal: the WARN ahead of the end rereads the cache and says when it was
// renewed outside the mount (which keeps its ticket) and when it was not.
func TestWatchTicketSeesOutsideRenewal(t *testing.T) {
	start := time.Now().Truncate(time.Second)
	end := start.Add(time.Hour)
	for _, tc := range []struct {
		name     string
		cacheEnd time.Time
		want     string
	}{
		{"renewed", end.Add(10 * time.Hour), "renewed outside the mount"},
		{"not renewed", end, "expires soon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := filepath.Join(t.TempDir(), "krb5cc")
			writeCCache(t, cc, "flink", "EX.COM", tc.cacheEnd)
			var buf bytes.Buffer
			now := start
			watchTicket(slog.New(slog.NewTextHandler(&buf, nil)), cc, end, func() time.Time { return now }, func(d time.Duration) bool {
				now = now.Add(d)
				return true
			})
			first, _, _ := strings.Cut(buf.String(), "\n")
			if !strings.Contains(first, tc.want) || strings.Contains(first, "cache_reread_error") {
				t.Errorf("first WARN %q, want %q", first, tc.want)
			}
		})
	}
}
