//go:build hdfs

package integration

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// With the hdfs tag the quarantine suite also runs on a real MiniDFSCluster: the staging there is an
// entry record and a rename into the store's quarantine folder (hdfsquarantine).
func init() { qBackends = append(qBackends, qHDFS) }

var qHDFS = qBackend{"hdfs", func(t *testing.T) *qStore {
	mntRequire(t)
	c := minidfs.Start(t, minidfs.Options{})
	storeDir := c.Root() + "/store"
	root := c.URI(storeDir)
	tr, err := treegen.IncidentOne(filepath.Join(t.TempDir(), "tree"), time.Now(), treegen.Options{URIPrefix: root})
	if err != nil {
		t.Fatal(err)
	}
	c.Upload(t, tr.Root, storeDir) // keeps the files' mtimes
	ctx := context.Background()
	st, err := hdfscli.OpenStore(ctx, root, hdfscli.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.FS().Close() })
	wrong := []string{"--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false", "--quarantine", "24h"}
	return &qStore{tr: tr, root: root,
		wrongPolicy: wrong,
		// A file put now is young: the kill -9 test deletes under the wrong policy.
		killArgs: wrong,
		contents: func(t *testing.T) map[string]qFile { return hdfsContents(t, st.FS(), storeDir) },
		put: func(t *testing.T, key string) {
			p := hdfsclient.Join(storeDir, key)
			err := st.FS().MkdirAll(ctx, path.Dir(p), 0o755)
			var w hdfsclient.Writer
			if err == nil {
				w, err = st.FS().Create(ctx, p, 0o644)
			}
			if err == nil {
				_, err = w.Write([]byte(key))
				if cerr := w.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		},
		leftovers: 400, killAfter: 120, mtimes: true,
		verify: func(t *testing.T, p *mntProc) {
			if out, code := p.cli("verify"); code != 0 {
				t.Fatalf("verify after restoring everything: exit %d\n%s", code, out)
			}
		},
	}
}}

// hdfsContents reads every file of the HDFS store dir outside the quarantine folder.
func hdfsContents(t *testing.T, f hdfsclient.FS, dir string) map[string]qFile {
	t.Helper()
	ctx := context.Background()
	out := map[string]qFile{}
	var walk func(key string)
	walk = func(key string) {
		var files []hdfsclient.FileInfo
		var dirs []string
		err := f.List(ctx, hdfsclient.Join(dir, key), func(page []hdfsclient.FileInfo) error {
			for _, fi := range page {
				k := fi.Name
				if key != "" {
					k = key + "/" + fi.Name
				}
				switch {
				case store.InQuarantine(k):
				case fi.IsDir:
					dirs = append(dirs, k)
				default:
					fi.Name = k
					files = append(files, fi)
				}
			}
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			return // removed by the mount meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, fi := range files {
			r, err := f.Open(ctx, hdfsclient.Join(dir, fi.Name))
			if errors.Is(err, fs.ErrNotExist) {
				continue // staged by the mount between the listing and the read
			}
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, r.Size())
			n, err := r.ReadAt(b, 0)
			r.Close()
			if err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
				t.Fatalf("read %s: %v", fi.Name, err)
			}
			out[fi.Name] = qFile{string(b[:n]), fi.ModTime}
		}
		for _, d := range dirs {
			walk(d)
		}
	}
	walk("")
	return out
}
