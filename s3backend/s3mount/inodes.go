package s3mount

import (
	"context"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// inodes numbers the mount's nodes and keeps the number of file inodes the kernel holds bounded.
//
// Numbers: a node's inode number is derived from its key (FNV-1a), so a key the kernel forgot and looks
// up again gets the number it had (coreutils' mv, cp and rm compare st_ino across their calls; a number
// that changed between two stats of one name makes them fail). Two live nodes of different objects never
// share a number: the live numbers are held in slots, and a key whose number is held by another object
// (another key, the other file type, a name renamed away or removed while the kernel still holds it)
// takes the next free one. A collision of 64-bit hashes is rare; a number that changes because of one is
// seen only after the kernel forgot both.
//
// Memory: the kernel keeps every inode a readdirplus or lookup gave it until memory pressure, whatever
// the entry timeout, and go-fuse keeps a node for each (and so the mount's share), so a find over millions
// of objects would hold millions of nodes. Beyond max live file inodes the oldest ones not touched since
// are handed to the kernel to prune (FUSE_NOTIFY_PRUNE; where the kernel lacks it, an entry invalidation
// of their name): the kernel drops those not in use (open, a working directory) and sends FORGET, after
// which go-fuse and the slot release them. Directories are not pruned (few, and parents of the rest).
type inodes struct {
	mu    sync.Mutex
	live  map[uint64]*inoSlot
	files int // slots of files (the live file inodes)
	// recent names the file nodes in the order they were last handed to the kernel (each at most once:
	// node.queued); the pruner takes the oldest first. It names them by number and generation, not by
	// pointer, so that a node the kernel forgot is garbage at once, not when the queue reaches it.
	recent []nodeRef
	sent   []*node // named in the last prune round
	max    int     // live file inodes kept (<= 0: no pruning)
	kick   chan struct{}
	root   *gofs.Inode
	log    *slog.Logger
	prune  func(root *gofs.Inode, ns []*gofs.Inode) syscall.Errno
	hash   func(key string) uint64 // the number a key asks for first (tests make keys collide)
	gen    uint64                  // the last generation handed out
}

// inoSlot is one live inode number: the object holding it (key and type; key "" once the name was
// removed or renamed away while the kernel may hold the node: the number stays taken, and no new object
// gets it) and the nodes handed to the kernel with it (one, or more when lookups of one name raced).
// Every node gets its own generation, so go-fuse never merges two nodes behind the mount's back: each
// one handed out is the kernel's until its FORGET, which removes it from the slot (OnForget).
type inoSlot struct {
	key   string
	dir   bool
	nodes []*node
}

// pruneBatch bounds the nodes of one prune notification.
const pruneBatch = 1024

func newInodes(max int, log *slog.Logger) *inodes {
	return &inodes{live: make(map[uint64]*inoSlot), max: max, kick: make(chan struct{}, 1), log: log,
		prune: notifyPrune, hash: inoOf}
}

// inoOf is the hash of key the number starts from.
func inoOf(key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return h.Sum64()
}

// nextIno is the number after h, skipping 0, the root's 1 and the all-ones go-fuse reserves.
func nextIno(h uint64) uint64 {
	for {
		h++
		if h > 1 && h != ^uint64(0) {
			return h
		}
	}
}

// peek returns the number key would get now (for readdir's d_ino).
func (t *inodes) peek(key string, dir bool) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := nextIno(t.hash(key) - 1)
	for {
		if s := t.live[h]; s == nil || (s.key == key && s.dir == dir) {
			return h
		}
		h = nextIno(h)
	}
}

// assign gives n, about to be handed to go-fuse for key, its number and generation; touch queues it
// for pruning once go-fuse has initialized it (NewInode). A node that is not handed out after all (the
// operation failed) must be released with forgot.
func (t *inodes) assign(key string, dir bool, n *node) (ino, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	h := nextIno(t.hash(key) - 1)
	for {
		s := t.live[h]
		if s == nil {
			t.live[h] = &inoSlot{key: key, dir: dir, nodes: []*node{n}}
			if !dir {
				t.files++
			}
			break
		}
		if s.key == key && s.dir == dir {
			s.nodes = append(s.nodes, n)
			break
		}
		h = nextIno(h)
	}
	n.ino, n.gen = h, t.gen
	return h, t.gen
}

// touch records that the kernel was just handed n (a new node, or a lookup of a known one).
func (t *inodes) touch(n *node) {
	if n.ino == 0 || n.IsDir() {
		return
	}
	t.mu.Lock()
	t.touchLocked(n)
	t.mu.Unlock()
}

func (t *inodes) touchLocked(n *node) {
	if t.max <= 0 {
		return // no bound: nothing is pruned, nothing queued
	}
	if !n.queued {
		n.queued = true
		t.recent = append(t.recent, nodeRef{n.ino, n.gen})
	}
	if t.files > t.max {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
	if len(t.recent) > 2*max(t.files, t.max)+pruneBatch {
		// Nodes the kernel forgot on its own (unlinked, pruned by memory pressure) leave the queue here,
		// so it stays within about twice the live files (and a compaction comes once per as many touches).
		keep := t.recent[:0]
		for _, r := range t.recent {
			if t.findLocked(r) != nil {
				keep = append(keep, r)
			}
		}
		t.recent = keep
	}
}

// nodeRef names a node by its number and generation.
type nodeRef struct{ ino, gen uint64 }

// findLocked returns the live node r names, or nil. t.mu held.
func (t *inodes) findLocked(r nodeRef) *node {
	if s := t.live[r.ino]; s != nil {
		for _, n := range s.nodes {
			if n.gen == r.gen {
				return n
			}
		}
	}
	return nil
}

// forgot releases n's share of its number (go-fuse's OnForget).
func (t *inodes) forgot(n *node) {
	if n.ino == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n.forgotten = true
	s := t.live[n.ino]
	if s == nil {
		return
	}
	for i, m := range s.nodes {
		if m == n {
			s.nodes = slices.Delete(s.nodes, i, i+1)
			break
		}
	}
	if len(s.nodes) == 0 {
		delete(t.live, n.ino)
		if !s.dir {
			t.files--
		}
	}
}

// retire marks n's number as no longer naming its key (the name was removed, or renamed away and the
// node moved): a new object of that key takes another number while the kernel may still hold n.
func (t *inodes) retire(n *node) {
	t.rekey(n, "")
}

// rekey makes n's number name key (n was renamed to it; "" retires it).
func (t *inodes) rekey(n *node, key string) {
	if n.ino == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.live[n.ino]; s != nil {
		s.key = key
	}
}

// liveFiles is the number of file inodes the kernel holds (tests, measurements).
func (t *inodes) liveFiles() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.files
}

// run prunes until ctx ends: when a lookup goes beyond the bound, and again while the kernel holds more
// than the bound (a prune names inodes the kernel may not hold yet, such as those of the readdirplus
// reply being built, or holds in use; they are named again in a later round).
func (t *inodes) run(ctx context.Context) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
		case <-retry:
		}
		retry = nil
		if t.pruneOnce() {
			retry = time.After(pruneRetry)
		}
	}
}

// pruneRetry is the pause between two prune rounds while the kernel holds more than the bound.
const pruneRetry = 200 * time.Millisecond

// pruneOnce hands the oldest file nodes beyond the bound to the kernel to forget; the nodes named in
// the previous round that are still held go back to the end of the queue first. It reports whether the
// kernel still holds more than the bound.
func (t *inodes) pruneOnce() bool {
	t.mu.Lock()
	for _, n := range t.sent {
		if !n.forgotten && !n.queued {
			n.queued = true
			t.recent = append(t.recent, nodeRef{n.ino, n.gen})
		}
	}
	clear(t.sent)
	t.sent = t.sent[:0]
	over := t.files - t.max*9/10 // prune a tenth below the bound, so that pruning comes in batches
	var batch []*gofs.Inode
	for over > 0 && len(batch) < pruneBatch && len(t.recent) > 0 {
		n := t.findLocked(t.recent[0])
		t.recent = t.recent[1:]
		if n == nil {
			continue // forgotten since
		}
		n.queued = false
		if n.writing() {
			continue
		}
		batch = append(batch, n.EmbeddedInode())
		t.sent = append(t.sent, n)
		over--
	}
	root := t.root
	prune := t.prune
	still := t.max > 0 && t.files > t.max && (len(t.recent) > 0 || len(t.sent) > 0)
	t.mu.Unlock()
	if len(batch) == 0 || root == nil {
		return still
	}
	if errno := prune(root, batch); errno != 0 {
		t.log.Debug("inode prune notification failed", "nodes", len(batch), "err", errno)
	}
	return still
}

// notifyPrune asks the kernel to forget ns (FUSE_NOTIFY_PRUNE, Linux 6.18); without it each one's name
// is invalidated, which drops the kernel's dentry and so the inode once unused.
func notifyPrune(root *gofs.Inode, ns []*gofs.Inode) syscall.Errno {
	errno := root.NotifyPrune(ns)
	if errno != syscall.ENOSYS {
		return errno
	}
	for _, n := range ns {
		if name, parent := n.Parent(); parent != nil {
			_ = parent.NotifyEntry(name)
		}
	}
	return 0
}
