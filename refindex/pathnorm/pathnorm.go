// Package pathnorm gives every storage object one canonical identity, so that the names Flink wrote
// into `_metadata` files and the names a guarded filesystem is asked to delete can be compared.
//
// # The canonical key
//
// An object inside the guarded store is identified by its store-relative key: the physical location
// in the store, '/'-separated, no leading or trailing slash, duplicate slashes and "." removed, ".."
// resolved. Everything that names the object differently is mapped onto that key:
//
//   - scheme aliases: s3://, s3a://, s3n://, s3p:// (and the native S3 file system's s3://) of the
//     same bucket and key are one object; scheme names are case-insensitive;
//   - file:/x, file:///x, file://localhost/x and a scheme-less /x are the same local file;
//   - prefix maps (--map PREFIX=STOREPATH) tie what Flink wrote (file:/flink/ckpt on the TaskManagers,
//     hdfs://nn:8020/flink behind an NFS gateway, s3://bucket/flink) to a directory of the store; the
//     store's own root (Store.Root) is always mapped to "" so that file: URIs into a local store's own
//     directory and s3:// URIs into an S3 store's bucket/prefix need no map; the longest prefix wins;
//   - relative handles (savepoints, exclusive checkpoint files) resolve against the directory of the
//     `_metadata` that names them.
//
// Entropy injection (s3.entropy.key): Flink writes each data file to a path where the key segment of
// the configured checkpoint directory is replaced by random characters, and records that resolved
// path in `_metadata`; the `_metadata` file itself is written where the key segment is removed. Data
// files with different random segments are different physical objects, so the canonical key keeps the
// random segment — it is the key the object really has in the store and the key a delete through the
// mount names. The entropy key matters in two places: a prefix map whose PREFIX contains the key
// (s3://bucket/_entropy_/flink=…) matches any single segment, or no segment at all, in the key's place,
// and if STOREPATH contains the key too, the matched random segment is carried over (else dropped);
// and JobFolder attributes an entropy-injected data key to the entropy-free job folder its checkpoint
// `_metadata` lives in.
//
// A reference that no mapping ties to the store is "outside the guarded store": it keeps a canonical
// URI (scheme aliases and slashes normalised) so it can be reported, but nothing in the store is
// protected by it.
package pathnorm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// Mapping ties a URI prefix Flink wrote to a store-relative directory ("" = the store root).
type Mapping struct {
	From string
	To   string
	// Mountpoint marks the map a guard mount adds for its own mountpoint (file:<dir>=). It is left out
	// of Fingerprint: it only turns references that would otherwise be outside the store into store
	// keys, so an index derived without it is still right when it holds no such outside reference,
	// which the index checks (MountRules) instead of rebuilding.
	Mountpoint bool
}

// ParseMapping parses "PREFIX=STOREPATH" (the --map flag). The last '=' separates, so prefixes
// containing '=' work; STOREPATH may be empty (the store root).
func ParseMapping(s string) (Mapping, error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 {
		return Mapping{}, fmt.Errorf("prefix map %q: want PREFIX=STOREPATH, e.g. file:/flink/ckpt= or hdfs://nn:8020/flink=flink", s)
	}
	return Mapping{From: s[:i], To: s[i+1:]}, nil
}

// Config configures a Normalizer.
type Config struct {
	// StoreRoot is Store.Root(): an absolute local directory or a URI such as s3://bucket/prefix.
	StoreRoot string
	Maps      []Mapping
	// EntropyKey is Flink's s3.entropy.key (e.g. "_entropy_"); "" = no entropy injection.
	EntropyKey string
	// RootAliases are other names of StoreRoot, mapped to the store root like it: the directory as
	// the user gave it before symlinks were resolved (Flink writes paths through the link), a guard's
	// own mountpoint (Flink writing through the mount).
	RootAliases []string
	// External are URI prefixes of storage other than the store (another bucket, a savepoint folder
	// on HDFS) that references may legitimately name: they are reported, not refused (IsExternal).
	External []string
	// DefaultPorts gives, per scheme, the port an authority without one means, so that hdfs://nn/x
	// and hdfs://nn:8020/x are one object. nil = {"hdfs": 8020} (the NameNode RPC port HDFS clients
	// use when a URI names none); an empty map disables it.
	DefaultPorts map[string]int
}

// defaultPorts applies when Config.DefaultPorts is nil.
var defaultPorts = map[string]int{"hdfs": 8020}

// Key is the canonical identity of a referenced object.
type Key struct {
	// Path is the store-relative key when Inside, else the canonical URI of the outside object.
	Path   string
	Inside bool
}

type rule struct {
	from URI
	to   []string // store-relative segments
	src  string
	// mount: added for a guard mount's mountpoint (Mapping.Mountpoint).
	mount bool
	// For the allocation-free fast path (see fastAbsolute): the canonical path of from ("" for the
	// root), the store prefix it maps to ("" or "dir/"), and whether from contains the entropy key.
	fromPath, toPrefix string
	entropy            bool
}

// Normalizer maps URIs to canonical keys. It is immutable and safe for concurrent use.
type Normalizer struct {
	cfg   Config
	ports map[string]int // scheme → default port
	rules []rule         // longest From first
	// external: the parsed Config.External prefixes.
	external []URI
}

// parse is ParseURI plus the configured default ports.
func (n *Normalizer) parse(s string) URI {
	u := ParseURI(s)
	if p := n.ports[u.Scheme]; p > 0 && u.Authority != "" && !hasPort(u.Authority) {
		u.Authority = fmt.Sprintf("%s:%d", u.Authority, p)
	}
	return u
}

// hasPort reports whether an authority ends in :port (an IPv6 literal is bracketed).
func hasPort(a string) bool {
	i := strings.LastIndexByte(a, ':')
	return i >= 0 && i > strings.LastIndexByte(a, ']')
}

// New validates cfg and builds a Normalizer.
func New(cfg Config) (*Normalizer, error) {
	n := &Normalizer{cfg: cfg, ports: cfg.DefaultPorts}
	if n.ports == nil {
		n.ports = defaultPorts
	}
	seen := map[string]string{}
	add := func(from, to, src string) error {
		u := n.parse(from)
		if u.Scheme == "" {
			return fmt.Errorf("prefix map %q: PREFIX must be absolute (a URI such as s3://bucket/flink or a path starting with /)", src)
		}
		if strings.Contains(to, "://") || strings.HasPrefix(to, "file:") {
			return fmt.Errorf("prefix map %q: STOREPATH must be a path inside the store, not a URI", src)
		}
		toSegs := cleanSegs(to, false)
		for _, s := range toSegs {
			if s == ".." {
				return fmt.Errorf("prefix map %q: STOREPATH climbs above the store root", src)
			}
		}
		k := u.String()
		if prev, ok := seen[k]; ok && prev != strings.Join(toSegs, "/") {
			return fmt.Errorf("prefix map %q: %s is already mapped to %q", src, k, prev)
		}
		seen[k] = strings.Join(toSegs, "/")
		r := rule{from: u, to: toSegs, src: src}
		if len(u.Segs) > 0 {
			r.fromPath = "/" + strings.Join(u.Segs, "/")
		}
		if len(toSegs) > 0 {
			r.toPrefix = strings.Join(toSegs, "/") + "/"
		}
		for _, sg := range u.Segs {
			r.entropy = r.entropy || (cfg.EntropyKey != "" && sg == cfg.EntropyKey)
		}
		n.rules = append(n.rules, r)
		return nil
	}
	if cfg.StoreRoot != "" {
		if err := add(cfg.StoreRoot, "", "store root "+cfg.StoreRoot); err != nil {
			return nil, err
		}
	}
	for _, a := range cfg.RootAliases {
		if a == "" || a == cfg.StoreRoot {
			continue
		}
		if err := add(a, "", "store root alias "+a); err != nil {
			return nil, err
		}
	}
	for _, m := range cfg.Maps {
		if err := add(m.From, m.To, m.From+"="+m.To); err != nil {
			return nil, err
		}
		if m.Mountpoint {
			n.rules[len(n.rules)-1].mount = true
		}
	}
	for _, e := range cfg.External {
		u := n.parse(e)
		if u.Scheme == "" {
			return nil, fmt.Errorf("external prefix %q: must be absolute (a URI such as hdfs://nn:8020/savepoints or a path starting with /)", e)
		}
		n.external = append(n.external, u)
	}
	sort.SliceStable(n.rules, func(i, j int) bool { return len(n.rules[i].from.Segs) > len(n.rules[j].from.Segs) })
	return n, nil
}

// Fingerprint identifies the configuration: an index built with another mapping must be rebuilt,
// because its keys were derived with different rules.
func (n *Normalizer) Fingerprint() string {
	h := sha256.New()
	// v2: host authorities folded to lower case and default ports added (keys derived by v1 differ).
	// v3: a doubled slash at the start of a path no longer leaves an empty first segment (v2 derived
	// "/x" from s3://b//x, a key no object has, so the object x was not protected).
	// v4: references no mapping covers are placed where the store proves them (Candidates), and
	// external prefixes are part of the configuration.
	fmt.Fprintf(h, "v4\x00%s\x00%s\x00", n.cfg.StoreRoot, n.cfg.EntropyKey)
	ext := make([]string, 0, len(n.external))
	for _, e := range n.external {
		ext = append(ext, e.String())
	}
	sort.Strings(ext)
	for _, e := range ext {
		fmt.Fprintf(h, "external\x00%s\x00", e)
	}
	if n.cfg.DefaultPorts != nil {
		schemes := make([]string, 0, len(n.ports))
		for s := range n.ports {
			schemes = append(schemes, s)
		}
		sort.Strings(schemes)
		for _, s := range schemes {
			fmt.Fprintf(h, "port\x00%s\x00%d\x00", s, n.ports[s])
		}
	}
	for _, r := range n.rules {
		if r.mount {
			continue
		}
		fmt.Fprintf(h, "%s\x00%s\x00", r.from.String(), strings.Join(r.to, "/"))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// MountRules names the mountpoint maps (Mapping.Mountpoint) in a stable form, "" when there are none.
func (n *Normalizer) MountRules() string {
	var out []string
	for _, r := range n.rules {
		if r.mount {
			out = append(out, r.from.String()+"="+strings.Join(r.to, "/"))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\x00")
}

// Config returns the configuration the normalizer was built from.
func (n *Normalizer) Config() Config { return n.cfg }

// Absolute maps an absolute reference (a URI or a /path) to its canonical key.
func (n *Normalizer) Absolute(ref string) Key {
	if k, ok := n.fastAbsolute(ref); ok {
		return k
	}
	return n.slowAbsolute(ref)
}

func (n *Normalizer) slowAbsolute(ref string) Key {
	u := n.parse(ref)
	if u.Scheme == "" {
		// Not absolute: Flink would resolve it against its default file system, which we do not
		// know. Keep it visible as an outside reference rather than guessing.
		return Key{Path: ref}
	}
	for _, r := range n.rules {
		if segs, ok := n.match(r, u); ok {
			return Key{Path: strings.Join(segs, "/"), Inside: true}
		}
	}
	return Key{Path: u.String()}
}

// fastAbsolute handles the common spelling — a lower-case scheme, file:/path or scheme://authority/path
// with a clean path — without allocating (millions of references per rebuild). It gives up (ok=false)
// whenever the general path could decide differently: odd spellings, or a candidate rule that carries
// the entropy key.
func (n *Normalizer) fastAbsolute(ref string) (Key, bool) {
	i := strings.IndexByte(ref, ':')
	if i < 2 {
		return Key{}, false
	}
	scheme := ref[:i]
	for j := 0; j < len(scheme); j++ {
		if c := scheme[j]; !(c >= 'a' && c <= 'z' || j > 0 && c >= '0' && c <= '9') {
			return Key{}, false
		}
	}
	rest := ref[i+1:]
	authority := ""
	switch {
	case scheme == "file":
		if len(rest) < 2 || rest[0] != '/' || rest[1] == '/' {
			return Key{}, false
		}
	case strings.HasPrefix(rest, "//"):
		rest = rest[2:]
		j := strings.IndexByte(rest, '/')
		if j <= 0 {
			return Key{}, false
		}
		authority, rest = rest[:j], rest[j:]
		if s3Aliases[scheme] {
			scheme = "s3"
		}
	default:
		return Key{}, false
	}
	if !cleanAbsPath(rest) {
		return Key{}, false
	}
	for k := range n.rules {
		r := &n.rules[k]
		if r.from.Scheme != scheme || r.from.Authority != authority {
			continue
		}
		if r.entropy {
			return Key{}, false
		}
		switch {
		case r.fromPath == "":
			return Key{Path: r.toPrefix + rest[1:], Inside: true}, true
		case rest == r.fromPath:
			return Key{Path: strings.TrimSuffix(r.toPrefix, "/"), Inside: true}, true
		case strings.HasPrefix(rest, r.fromPath) && rest[len(r.fromPath)] == '/':
			return Key{Path: r.toPrefix + rest[len(r.fromPath)+1:], Inside: true}, true
		}
	}
	if scheme == "file" {
		return Key{Path: ref, Inside: false}, true
	}
	return Key{}, false // outside references keep the general path's canonical spelling
}

// cleanAbsPath reports whether p is "/seg/seg…" without empty, "." or ".." segments.
func cleanAbsPath(p string) bool {
	if len(p) < 2 || p[0] != '/' {
		return false
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		seg := p[start:i]
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		start = i + 1
	}
	return true
}

// Relative resolves a relative handle's name against the directory of the `_metadata` (a store key)
// that contains it. A name that climbs above the store root is hostile; it is reported as an outside
// reference so that it stays visible.
func (n *Normalizer) Relative(metadataKey, name string) Key {
	dir := ""
	if i := strings.LastIndexByte(metadataKey, '/'); i >= 0 {
		dir = metadataKey[:i]
	}
	segs := cleanSegs(dir+"/"+name, false)
	if len(segs) > 0 && segs[0] == ".." {
		return Key{Path: "relative:" + dir + "/" + name}
	}
	return Key{Path: strings.Join(segs, "/"), Inside: true}
}

// match reports whether u lies under rule r and returns the store-relative segments.
func (n *Normalizer) match(r rule, u URI) ([]string, bool) {
	if r.from.Scheme != u.Scheme || r.from.Authority != u.Authority {
		return nil, false
	}
	ek := n.cfg.EntropyKey
	i := 0 // index into u.Segs
	entropy, removed := "", false
	hasKey := false
	for j, f := range r.from.Segs {
		if ek != "" && f == ek {
			hasKey = true
			// Key removed (a _metadata path): the next template literal sits at u.Segs[i].
			if j+1 < len(r.from.Segs) && i < len(u.Segs) && u.Segs[i] == r.from.Segs[j+1] &&
				!(i+1 < len(u.Segs) && u.Segs[i+1] == r.from.Segs[j+1]) {
				removed = true
				continue
			}
			if j+1 == len(r.from.Segs) && i >= len(u.Segs) {
				removed = true
				continue
			}
			if i >= len(u.Segs) {
				return nil, false
			}
			entropy = u.Segs[i] // replaced by random characters (a data file)
			i++
			continue
		}
		if i >= len(u.Segs) || u.Segs[i] != f {
			return nil, false
		}
		i++
	}
	out := make([]string, 0, len(r.to)+len(u.Segs)-i)
	for _, t := range r.to {
		if ek != "" && t == ek && hasKey {
			if removed || entropy == "" {
				continue
			}
			out = append(out, entropy)
			continue
		}
		out = append(out, t)
	}
	return append(out, u.Segs[i:]...), true
}

// Directory returns the canonical URI of the folder holding an absolute reference (for a suggested
// --external), or "" when it has none.
func (n *Normalizer) Directory(uri string) string {
	u := n.parse(uri)
	if u.Scheme == "" || len(u.Segs) < 2 {
		return ""
	}
	u.Segs = u.Segs[:len(u.Segs)-1]
	return u.String()
}

// IsExternal reports whether an outside reference (a canonical URI, as Absolute returns it) lies
// below one of the prefixes declared external (Config.External): storage other than the store that
// checkpoints may legitimately reference. Such references are reported, never refused.
func (n *Normalizer) IsExternal(uri string) bool {
	if len(n.external) == 0 {
		return false
	}
	u := n.parse(uri)
	for _, e := range n.external {
		if e.Scheme != u.Scheme || e.Authority != u.Authority || len(e.Segs) > len(u.Segs) {
			continue
		}
		match := true
		for i, s := range e.Segs {
			if u.Segs[i] != s {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
