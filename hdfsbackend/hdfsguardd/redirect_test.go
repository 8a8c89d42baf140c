//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
)

// TestShellRedirectionOnHDFS: a shell's `> f` through the mount of a real HDFS (open, dup2 to stdout,
// close of the original descriptor, then the write) writes the file, new or existing, and the content
// is on HDFS once the shell is done.
func TestShellRedirectionOnHDFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	storeDir, cl, dir, mnt := emptyStore(t, c, "redirect")
	// Overwriting a file written a moment ago is what is tested, not the grace period that protects
	// young files: no grace.
	pol := refindex.DefaultPolicy()
	pol.Grace = time.Millisecond
	guarddtest.Start(t, guardd.Config{StoreDir: c.URI(storeDir), IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: pol}, func(ctx context.Context, c guardd.Config) error {
		return hdfsguardd.Run(ctx, c, opts)
	})
	for _, tc := range []struct{ name, script, file, want string }{
		{"builtin into a new file", `printf x > new`, "new", "x"},
		{"builtin over the file just written", `printf yy > new`, "new", "yy"},
		{"builtins in a group", `{ printf a; printf b; } > group`, "group", "ab"},
		// /bin/true's exit closes the inherited stdout (a FLUSH completing the file); the writes after it
		// continue the file with an HDFS append, here also past a partial last chunk and block packet.
		{"writes after an inherited descriptor closed", `{ printf a; /bin/true; printf b; } > again`, "again", "ab"},
		{"appends of many packets", `{ seq 1 30000; /bin/true; seq 30001 60000; /bin/true; printf end; } > seq`, "seq", seqLines(1, 60000) + "end"},
		{"external command", `/usr/bin/printf z > ext`, "ext", "z"},
		{"empty", `: > empty`, "empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("bash", "-c", tc.script)
			cmd.Dir = filepath.Join(mnt, "j")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s through the mount: %v %s", tc.script, err, out)
			}
			// An empty file is completed by the release that follows close.
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, err := readHDFS(ctx, cl, storeDir+"/j/"+tc.file)
				if err == nil && got == tc.want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("HDFS %s = %s, %v; want %s", tc.file, brief(got), err, brief(tc.want))
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got, err := os.ReadFile(filepath.Join(mnt, "j", tc.file)); err != nil || string(got) != tc.want {
				t.Errorf("read back through the mount %s, %v; want %s", brief(string(got)), err, brief(tc.want))
			}
		})
	}
}

// seqLines is what seq from to prints.
func seqLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

// brief quotes s, cut to its length beyond 80 bytes.
func brief(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q… (%d bytes)", s[:40], len(s))
	}
	return strconv.Quote(s)
}

// readHDFS reads p with the Go client beside the mount.
func readHDFS(ctx context.Context, fs hdfsclient.FS, p string) (string, error) {
	r, err := fs.Open(ctx, p)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b := make([]byte, r.Size())
	if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
		return "", err
	}
	return string(b), nil
}
