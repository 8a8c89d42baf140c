
// TestUnprivMetadataRewrittenWhileSyncing: nobody rewrites a `_metadata` in place through the mount,
// in a loop (a real Flink 1.20 one and its first half, alternately) for several syncs, so that syncs
// read it while it changes (size changes mid-read, content swapped between stat and read). Outcome: no
// sync fails (a short read used to fail the whole sync: every deletion refused); a read during which
// it changed is discarded and read again (refindex TestMetadataChangingWhileRead has the exact
// interleavings); once the loop stops on the damaged half, it is listed as damaged (refusing only
// itself), the rest of the store is decided as usual, and its removal clears it at the next sync.
func TestUnprivMetadataRewrittenWhileSyncing(t *testing.T) {
	mntRequire(t)
	real := realFlinkMetadata(t)
	base, root, ref := matrixStore(t, "ckguard-matrix-changing-")
	p := sharedMount(t, base, root)
	bad := "scratch/job/chk-4/_metadata"
	done := make(chan struct{})
	var out string
	var code int
	go func() {
		defer close(done)
		out, code = asNobody(t, "/usr/bin/python3", "-c", `
import os, sys, time
full = bytes.fromhex(sys.argv[1]); half = full[:len(full)//2]
os.makedirs(os.path.dirname(sys.argv[2]))
end = time.time() + float(sys.argv[3])
n = 0
while time.time() < end:
    for b in (full, half):
        with open(sys.argv[2], "r+b" if n else "wb") as f:
            f.truncate(0)
            # in small pieces, so that a sync sees it half written
            for i in range(0, len(b), 512):
                f.write(b[i:i+512]); f.flush()
        n += 1
print("rewrites", n)
`, hex.EncodeToString(real), p.m(bad), "5")
	}()
	deadline := time.Now().Add(60 * time.Second)
	syncs := 0
	last := time.Time{}
loop:
	for {
		select {
		case <-done:
			break loop
		default:
		}
		s := p.stats()
		if s.SyncError != "" {
			t.Errorf("a sync failed while %s was rewritten: %s", bad, s.SyncError)
		}
		if s.LastSync.After(last) {
			syncs++
			last = s.LastSync
		}
		if time.Now().After(deadline) {
			t.Fatal("the rewrite loop did not end")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 {
		t.Fatalf("the rewrite loop as nobody: exit %d\n%s\n%s", code, out, p.logText())
	}
	t.Logf("%s; %d syncs seen during the loop", strings.TrimSpace(out), syncs)
	if syncs < 3 {
		t.Errorf("only %d syncs during the rewrite loop", syncs)
	}
	waitSyncAfter(t, p, time.Now())
	waitSyncAfter(t, p, time.Now())
	s := p.stats()
	if s.SyncError != "" || len(s.BadMetadata) != 1 || s.BadMetadata[0].Metadata != bad || s.BadMetadata[0].Scope != "itself" {
		t.Fatalf("after the loop stopped on the damaged half: sync error %q, bad %+v\n%s", s.SyncError, s.BadMetadata, p.logText())
	}
	elsewhereDecided(t, p, ref, "after the rewrite loop")
	backdate(t, root, bad)
	if out, code := asNobody(t, "rm", "-rf", p.m("scratch/job")); code != 0 {
		t.Errorf("rm -rf of the rewritten checkpoint folder as nobody: exit %d\n%s", code, out)
	}
	waitSyncAfter(t, p, time.Now())
	if s := p.stats(); len(s.BadMetadata) != 0 {
		t.Errorf("after its removal: bad %+v", s.BadMetadata)
	}
}
