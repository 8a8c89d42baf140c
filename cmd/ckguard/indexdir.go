package main

// The default index folder (no --index): one per store, found by the store's identity
// (internal/storeid), whatever path or URI spelling names the store on the command line.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/backends"
	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/internal/storeid"
)

// indexDir returns --index, or the store's default index folder under the user's cache directory:
// the folder a running mount of the same store answers in, whatever path that mount was given (a
// symlink, a bind mount); else the folder recorded for the store. It refuses when a mount of the
// store is running whose index it cannot find (the mount's --index, another user's cache): the
// command would otherwise open a second index, whose pins the mount never sees, or write the
// quarantine beside the mount.
func indexDir(c *cli.Context) (string, error) {
	if d := c.String("index"); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no --index given and no cache directory: %w", err)
	}
	s := c.String("store")
	id := storeIdentity(s)
	spellings := []string{legacySpelling(s)}
	var mounts []guardMount
	for _, m := range localGuardMounts() {
		if mountOf(m, id) {
			mounts = append(mounts, m)
			spellings = append(spellings, legacySpelling(m.source))
		}
	}
	found, err := storeid.Find(filepath.Join(base, "ckguard"), id, spellings, socketAnswers)
	if err != nil {
		return "", exitf(exitUsage, "ckguard: %v", err)
	}
	if !found.Live && len(mounts) > 0 {
		if err := refuseUnreachableMounts(s, filepath.Join(base, "ckguard"), mounts); err != nil {
			return "", err
		}
	}
	for _, o := range found.Others {
		if warnedOnce(c, "second index folder "+o) {
			continue
		}
		fmt.Fprintf(c.App.ErrWriter, "ckguard: warning: store %s has a second index folder %s (an older ckguard's name for it, or one made through another path); using %s. "+
			"Pins recorded only in the other are not used: re-pin them, then remove it (rm -rf %s) once no mount uses it\n", s, o, found.Dir, o)
	}
	recordIdentityIn(found.Dir, id)
	return found.Dir, nil
}

// recordIdentity records the store's identity in dir when dir is the default index folder (no
// --index), so that the same store under another path finds it; call it once dir exists.
func recordIdentity(c *cli.Context, dir string) {
	if c.String("index") != "" {
		return
	}
	recordIdentityIn(dir, storeIdentity(c.String("store")))
}

// recordIdentityIn writes id into dir unless it is recorded there already. A folder that does not
// exist yet is left alone (it gets the identity once made); a failure to write only costs finding
// the folder through another path, so it is logged, not returned.
func recordIdentityIn(dir string, id storeid.Identity) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return
	}
	if old, ok, err := storeid.Read(dir); err == nil && ok && old.Same(id) && old.Key == id.Key && old.Dev == id.Dev && old.Ino == id.Ino {
		return
	}
	if err := storeid.Write(dir, id); err != nil {
		cliLogger().Warn("cannot record the store's identity in its index folder; the store under another path will not find this index", "dir", dir, "err", err)
	}
}

// storeIdentity is the identity of a --store value, whatever spelling names it (its backend's
// Identity: a local directory by its real path and root inode, an S3 store by bucket and prefix, an
// HDFS one by authority and clean path).
func storeIdentity(s string) storeid.Identity { return backends.For(s).Identity(s) }

// legacySpelling is the string earlier versions hashed into the default folder's name: the absolute
// path (symlinks unresolved) or the URI as written.
func legacySpelling(s string) string {
	if backends.For(s).Remote() {
		return s
	}
	if abs, err := filepath.Abs(s); err == nil {
		return abs
	}
	return s
}

// mountOf reports whether the ckguard mount m guards the store id (by the source it was mounted with).
func mountOf(m guardMount, id storeid.Identity) bool {
	if !backends.For(m.source).Remote() && !filepath.IsAbs(m.source) {
		// A relative source names a folder relative to where the mount was started: unknown here.
		return false
	}
	return storeIdentity(m.source).Same(id)
}

// socketAnswers reports whether a running mount answers on the control socket of index folder dir.
func socketAnswers(dir string) bool {
	sock := control.DefaultSocket(dir)
	if _, err := os.Stat(sock); err != nil {
		return false
	}
	cl, err := control.Dial(sock)
	if err != nil {
		return false
	}
	cl.Close()
	return true
}

// warnedOnce reports whether the running command has already said what (a command resolves its index
// folder more than once); the first call says no and remembers it.
func warnedOnce(c *cli.Context, what string) bool {
	if c.App.Metadata == nil {
		c.App.Metadata = map[string]any{}
	}
	key := "warned: " + what
	if c.App.Metadata[key] != nil {
		return true
	}
	c.App.Metadata[key] = true
	return false
}

// refuseUnreachableMounts is the refusal for mounts of store whose index the command did not find
// under cache: a mount whose daemon still runs (or that cannot be shown to be gone) would keep its own
// pins, so the command must not open an index of its own beside it. A mount killed by kill -9 (its
// mountpoint says ENOTCONN) guards nothing and does not count. The mountpoints are probed by child
// processes (probeMounts), so a hung mount costs at most probeTimeout and is named as unchecked.
func refuseUnreachableMounts(store, cache string, mounts []guardMount) error {
	mnts := make([]string, len(mounts))
	for i, m := range mounts {
		mnts[i] = m.mountpoint
	}
	var running, unchecked []guardMount
	var why []string
	for i, r := range probeMounts(mnts) {
		switch r.state {
		case mountRunning:
			running = append(running, mounts[i])
		case mountUnchecked:
			unchecked = append(unchecked, mounts[i])
			why = append(why, mounts[i].mountpoint+": "+r.why)
		}
	}
	var msg string
	switch {
	case len(running) > 0:
		msg = fmt.Sprintf("store %s is guarded by the running mount on %s (mounted as %s)", store, running[0].mountpoint, running[0].source)
	case len(unchecked) > 0:
		msg = fmt.Sprintf("store %s has a mount on %s (mounted as %s) that counts as running", store, unchecked[0].mountpoint, unchecked[0].source)
	default:
		return nil
	}
	msg += ", whose index this command cannot reach (not in " + cache + ": it was mounted with --index, or by another user); " +
		"run the command as the user running the mount with that mount's --index (or --control-socket), so it goes through the mount; opening an index of its own would keep pins the mount never sees"
	if len(unchecked) > 0 {
		msg += ". Not checked: " + strings.Join(why, "; ") + "; whether its daemon still runs could not be checked, so it counts as running. " +
			"A mount whose daemon is stuck can be freed (OPERATIONS.md, \"A killed mount daemon does not go away\")"
	}
	return exitf(exitUsage, "ckguard: %s", msg)
}
