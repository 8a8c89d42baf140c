package s3mount

import "github.com/ckguard/ckguard/s3backend/deleteq"

// TuneQueue lets tests adjust the delete queue's options (wrap its rechecker or deleter).
func TuneQueue(o *Options, f func(*deleteq.Options)) { o.tuneQueue = f }

// HashInodes replaces the hash inode numbers start from (tests make every key collide).
func HashInodes(o *Options, h func(string) uint64) { o.inoHash = h }

// LiveFileInodes is the number of file inodes the kernel holds.
func (m *Mounted) LiveFileInodes() int { return m.fsys.inos.liveFiles() }

// InodeKnown reports whether the kernel holds an inode numbered for key.
func (m *Mounted) InodeKnown(key string) bool {
	t := m.fsys.inos
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.live {
		if s.key == key {
			return true
		}
	}
	return false
}
