package hdfsclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
)

func TestMoveToTrash(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1764590000000)
	f := hdfsfake.New("alice")
	for _, p := range []string{"/flink/j/a", "/user/alice/.Trash/Current/flink/j/b", "/user/alice/.Trash/Current/flink/j/c"} {
		if err := f.Put(p, []byte(p), now); err != nil {
			t.Fatal(err)
		}
	}
	to, err := hdfsclient.MoveToTrash(ctx, f, "/flink/j/a", now)
	if err != nil || to != "/user/alice/.Trash/Current/flink/j/a" {
		t.Fatalf("trash a = %q, %v", to, err)
	}
	// A name already in the trash is kept; the new one gets a suffix.
	if err := f.Put("/flink/j/b", []byte("new b"), now); err != nil {
		t.Fatal(err)
	}
	to, err = hdfsclient.MoveToTrash(ctx, f, "/flink/j/b", now)
	if err != nil || to != "/user/alice/.Trash/Current/flink/j/b.1764590000000" {
		t.Fatalf("trash b = %q, %v", to, err)
	}
	if old, _ := f.ReadFile("/user/alice/.Trash/Current/flink/j/b"); string(old) != "/user/alice/.Trash/Current/flink/j/b" {
		t.Errorf("the older trashed b was replaced: %q", old)
	}
	// Deleting inside the trash deletes for good.
	to, err = hdfsclient.MoveToTrash(ctx, f, "/user/alice/.Trash/Current/flink/j/c", now)
	if err != nil || to != "" {
		t.Fatalf("trash c = %q, %v", to, err)
	}
	want := "/user/alice/.Trash/Current/flink/j/a,/user/alice/.Trash/Current/flink/j/b,/user/alice/.Trash/Current/flink/j/b.1764590000000"
	if got := strings.Join(f.Files(), ","); got != want {
		t.Errorf("files %s\nwant %s", got, want)
	}
	// A NameNode in safe mode: nothing moved, the error says so.
	if err := f.Put("/flink/j/d", []byte("d"), now); err != nil {
		t.Fatal(err)
	}
	f.SetFault(func(op, _ string) error { return hdfsclient.ErrSafeMode })
	if _, err := hdfsclient.MoveToTrash(ctx, f, "/flink/j/d", now); !errors.Is(err, hdfsclient.ErrSafeMode) {
		t.Errorf("trash in safe mode: %v", err)
	}
	f.SetFault(nil)
	if _, err := f.Stat(ctx, "/flink/j/d"); err != nil {
		t.Errorf("d after a failed trash: %v", err)
	}
}
