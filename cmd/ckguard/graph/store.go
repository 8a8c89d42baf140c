package graph

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
)

// maxMetadata bounds what one `_metadata` may make the graph read (the index applies its own bound).
const maxMetadata = 256 << 20

// StoreRefs reads `_metadata` from the store and resolves its references with the same rules as
// the index (pathnorm with the same --map and --entropy-key), so the folders match the index's.
type StoreRefs struct {
	Store store.Store
	Norm  *pathnorm.Normalizer
	// Known reports whether a folder holds checkpoints (attributes entropy-injected keys); may be nil.
	Known func(folder string) bool
	// Inferred returns the prefix maps the index proved for a `_metadata`'s references
	// (CheckpointInfo.InferredMaps); may be nil.
	Inferred func(metadataKey string) []string
}

var (
	_ RefLister = (*StoreRefs)(nil)
	_ Sizer     = (*StoreRefs)(nil)
)

// NewStoreRefs builds a StoreRefs for st with the index's path mapping, including the store's other
// names (a local store opened through a symlink: Flink wrote its paths through the link), as the index
// does; otherwise references the index resolves would be drawn as outside the store.
func NewStoreRefs(st store.Store, maps []pathnorm.Mapping, entropyKey string) (*StoreRefs, error) {
	var aliases []string
	if ra, ok := st.(store.RootAliaser); ok {
		aliases = ra.RootAliases()
	}
	n, err := pathnorm.New(pathnorm.Config{StoreRoot: st.Root(), Maps: maps, EntropyKey: entropyKey, RootAliases: aliases})
	if err != nil {
		return nil, err
	}
	return &StoreRefs{Store: st, Norm: n}, nil
}

// Refs parses metadataKey and returns its references inside the store.
func (s *StoreRefs) Refs(ctx context.Context, metadataKey string) ([]Ref, error) {
	r, err := s.Store.Open(ctx, metadataKey)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if r.Size() > maxMetadata {
		return nil, fmt.Errorf("%s is %d bytes, more than the graph reads (%d)", metadataKey, r.Size(), maxMetadata)
	}
	m, err := flinkmeta.Parse(r, r.Size(), metadataKey, flinkmeta.Options{})
	if err != nil {
		return nil, err
	}
	var out []Ref
	for _, rf := range m.References(metadataKey) {
		var k pathnorm.Key
		if rf.Kind == flinkmeta.RefRelative {
			k = s.Norm.Relative(metadataKey, rf.URI)
		} else {
			k = s.Norm.Absolute(rf.URI)
		}
		if !k.Inside && s.Inferred != nil {
			// The index proved where this checkpoint's references live (a relocated store).
			k, _ = pathnorm.ApplyInferred(s.Inferred(metadataKey), k.Path)
		}
		if !k.Inside {
			continue
		}
		out = append(out, Ref{Key: k.Path, Folder: s.Norm.JobFolder(k.Path, s.Known), Dir: rf.Kind == flinkmeta.RefDirectory})
	}
	return out, nil
}

// Sizes lists the files below folder.
func (s *StoreRefs) Sizes(ctx context.Context, folder string) (map[string]int64, error) {
	out := map[string]int64{}
	err := s.Store.Walk(ctx, folder, func(o store.ObjectInfo) error {
		if !o.IsDir {
			out[o.Path] = o.Size
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	return out, err
}

// Size stats one key.
func (s *StoreRefs) Size(ctx context.Context, key string) (int64, bool, error) {
	o, err := s.Store.Stat(ctx, key)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return o.Size, true, nil
}

// SizeCache sums the store size of the files checkpoints reference, listing every folder at most once
// (the figure `ckguard checkpoints` shows: what a restore reads, not the size of `_metadata`).
type SizeCache struct{ c counter }

// NewSizeCache sizes through s.
func NewSizeCache(s Sizer) *SizeCache {
	return &SizeCache{counter{sizes: s, listed: map[string]map[string]int64{}}}
}

// Bytes returns the size of the distinct files refs name (everything below a directory handle) and
// how many of them are missing from the store. seen, when non-nil, collects the sizes by key so a
// caller can total several checkpoints counting each file once.
func (s *SizeCache) Bytes(ctx context.Context, refs []Ref, seen map[string]int64) (bytes int64, missing int, err error) {
	mine := map[string]bool{}
	add := func(k string, n int64, ok bool) {
		if mine[k] {
			return
		}
		mine[k] = true
		if !ok {
			missing++
			return
		}
		bytes += n
		if seen != nil {
			seen[k] = n
		}
	}
	for _, r := range refs {
		if r.Dir {
			below, err := s.c.list(ctx, r.Key)
			if err != nil {
				return 0, 0, err
			}
			for k, n := range below {
				add(k, n, true)
			}
			continue
		}
		if r.Folder != "" {
			inFolder, err := s.c.list(ctx, r.Folder)
			if err != nil {
				return 0, 0, err
			}
			if n, ok := inFolder[r.Key]; ok {
				add(r.Key, n, true)
				continue
			}
		}
		n, ok, err := s.c.sizes.Size(ctx, r.Key)
		if err != nil {
			return 0, 0, fmt.Errorf("stat %s: %w", r.Key, err)
		}
		add(r.Key, n, ok)
	}
	return bytes, missing, nil
}
