package mounttest

import (
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/store"
)

// reservedFolders: ckguard's own folders at the store root (the quarantine folder and the shared state
// area) are not there for the mount's users, root included: not listed, not found by name (ENOENT), no
// name made or moved there (EPERM); every request refused is audited (reserved-folder) with its errno
// and caller, and what the folders hold stays as it was. A folder of the same name below the root is an
// ordinary folder.
func reservedFolders(t *testing.T, h Harness) {
	e := start(t, h, syscall.EBUSY) // the rule answers ENOENT/EPERM whatever the index's refusals get
	entry, pins := store.QuarantineDir+"/entry", store.SharedDir+"/v1/pins"
	e.st.Put(t, entry, "staged")
	e.st.Put(t, pins, "pins")
	e.st.Put(t, freeKey, "garbage")

	ents, err := os.ReadDir(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, en := range ents {
		listed = append(listed, en.Name())
	}
	if slices.Contains(listed, store.QuarantineDir) || slices.Contains(listed, store.SharedDir) || !slices.Contains(listed, "job") {
		t.Errorf("the root lists %v: want job, and neither %s nor %s", listed, store.QuarantineDir, store.SharedDir)
	}
	if n := len(e.records(t)); n != 0 {
		t.Errorf("a listing left %d audit records (a name left out is not a refusal)", n)
	}

	// The first look at a name reaches the mount; a later one may be answered by the kernel's cache of
	// missing names, so only the requests that always reach the mount must each leave a record.
	type reservedCase struct {
		name    string
		do      func() error
		errno   syscall.Errno
		op, key string // the record it must leave ("": none required)
	}
	cases := []reservedCase{
		{"stat of the quarantine folder", func() error { _, err := os.Stat(e.path(store.QuarantineDir)); return err },
			syscall.ENOENT, "lookup", store.QuarantineDir},
		{"stat of the shared state area", func() error { _, err := os.Stat(e.path(store.SharedDir)); return err },
			syscall.ENOENT, "lookup", store.SharedDir},
		{"read of an entry", func() error { _, err := os.ReadFile(e.path(entry)); return err }, syscall.ENOENT, "", ""},
		{"mkdir of the quarantine folder", func() error { return os.Mkdir(e.path(store.QuarantineDir), 0o755) },
			syscall.EPERM, "mkdir", store.QuarantineDir},
		{"create of the shared state area", func() error {
			f, err := os.OpenFile(e.path(store.SharedDir), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err == nil {
				f.Close()
			}
			return err
		}, syscall.EPERM, "create", store.SharedDir},
		{"rename onto the quarantine folder", func() error { return os.Rename(e.path(freeKey), e.path(store.QuarantineDir)) },
			syscall.EPERM, "rename", freeKey},
		{"rename into the quarantine folder", func() error { return os.Rename(e.path(freeKey), e.path(store.QuarantineDir+"/planted")) },
			syscall.ENOENT, "", ""},
	}
	if h.Symlinks {
		cases = append(cases, reservedCase{"symlink named like the shared state area", func() error { return os.Symlink("job", e.path(store.SharedDir)) },
			syscall.EPERM, "symlink", store.SharedDir})
	}
	if h.HardLinks {
		cases = append(cases, reservedCase{"hard link named like the quarantine folder", func() error { return os.Link(e.path(freeKey), e.path(store.QuarantineDir)) },
			syscall.EPERM, "link", store.QuarantineDir})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.records(t))
			want(t, tc.name, tc.do(), tc.errno)
			if tc.op == "" {
				return
			}
			added := e.records(t)[before:]
			i := slices.IndexFunc(added, func(r audit.Record) bool { return r.Op == tc.op && r.Path == tc.key })
			if i < 0 {
				t.Errorf("no record of the refused %s of %s: %+v", tc.op, tc.key, added)
				return
			}
			if r := added[i]; r.Decision != "refuse" || r.Reason != string(guard.ReasonReservedFolder) || r.Errno != guard.ErrnoName(tc.errno) ||
				r.PID == 0 || r.Message == "" {
				t.Errorf("incomplete refusal record (want refuse, reason %s, errno %s, pid, message): %+v", guard.ReasonReservedFolder, guard.ErrnoName(tc.errno), r)
			}
		})
	}
	e.intact(t, "the quarantine folder's entry", entry, "staged")
	e.intact(t, "the shared state area's file", pins, "pins")
	e.intact(t, "the file renamed nowhere", freeKey, "garbage")
	if got := e.st.Files(t); slices.Contains(got, store.SharedDir) || slices.Contains(got, store.QuarantineDir) ||
		slices.Contains(got, store.QuarantineDir+"/planted") {
		t.Errorf("a name was made in a reserved place: %v", got)
	}

	// Below the root the same names are ordinary folders.
	nested := "job/" + store.QuarantineDir
	want(t, "mkdir of "+nested, os.Mkdir(e.path(nested), 0o755), 0)
	if err := os.WriteFile(e.path(nested+"/f"), []byte("x"), 0o644); err != nil {
		t.Errorf("write below %s: %v", nested, err)
	}
	e.intact(t, "a file below "+nested, nested+"/f", "x")
}
