package pathnorm

import (
	"strings"
	"testing"
)

// fuzzNormalizers are fixed configurations every fuzzed reference is mapped with: a local store with
// prefix maps of every kind, an S3 store with entropy injection, a bare bucket.
func fuzzNormalizers(t *testing.T) []*Normalizer {
	var out []*Normalizer
	for _, cfg := range []Config{
		{StoreRoot: "/srv/flink", Maps: []Mapping{{From: "file:/flink/ckpt", To: ""}, {From: "hdfs://nn:8020/flink", To: "hdfs"},
			{From: "s3://bucket/flink", To: "s3"}, {From: "s3://bucket/flink/special", To: "elsewhere/sp"}}},
		{StoreRoot: "s3://ckpt-bucket/prod", EntropyKey: "_entropy_", Maps: []Mapping{
			{From: "s3://ckpt-bucket/prod/_entropy_/flink", To: "_entropy_/flink"}, {From: "s3://other/_entropy_/cp", To: "cp"}}},
		{StoreRoot: "s3://b"},
	} {
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// checkCleanKey fails unless key is a canonical store key: no leading or trailing slash, no empty, "."
// or ".." segment. Anything else could name an object outside the store, or one object two ways.
func checkCleanKey(t *testing.T, what, key string) {
	if key == "" {
		return
	}
	for _, s := range strings.Split(key, "/") {
		if s == "" || s == "." || s == ".." {
			t.Fatalf("%s = %q: not a canonical store key (segment %q)", what, key, s)
		}
	}
}

// s3Spellings returns ref under every S3 scheme alias (in two letter cases) when it is an S3 URI.
func s3Spellings(ref string) []string {
	i := strings.Index(ref, "://")
	if i < 0 || !s3Aliases[strings.ToLower(ref[:i])] {
		return nil
	}
	rest := ref[i:]
	var out []string
	for _, s := range []string{"s3", "s3a", "s3n", "s3p", "S3", "S3A", "s3P"} {
		out = append(out, s+rest)
	}
	return out
}

// FuzzAbsolute maps hostile references (and a hostile --map / --entropy-key configuration) to keys and
// checks the properties the guard relies on (safety rule 5: one object, one key):
//   - nothing panics;
//   - the allocation-free fast path gives exactly the general path's answer;
//   - an inside key is canonical;
//   - every S3 scheme alias of a reference gives the same key;
//   - a key of a store with a plain root, spelled as a URI below that root again, maps back to itself.
func FuzzAbsolute(f *testing.F) {
	for _, s := range []string{
		"file:/srv/flink/job/shared/a", "file:///srv/flink/job/shared/a", "file://localhost/srv/flink/x",
		"/srv/flink/job/shared/a", "file:/srv//flink///job/shared/a/", "file:/srv/flink/./job/x/../shared/a",
		"file:/srv/flink/../etc/passwd", "file:/../../srv/flink/a", "hdfs://nn:8020/flink/job/shared/s",
		"hdfs://NN/flink/j/x", "hdfs:///flink/job/shared/s", "s3a://bucket/flink/j/shared/s", "S3P://bucket/flink/special/x",
		"s3://ckpt-bucket/prod/gf36/flink/job/shared/f", "s3://ckpt-bucket/prod/flink/job/chk-3/_metadata",
		"s3a://other/Xy9z/cp/job/shared/f", "s3://b/k/../../x", "s3://b//x/y", "s3://ckpt-bucket//prod/j/x", "s3://b", "s3://b/", "C:/x", "job/x", ":", "s3:", "s3://",
	} {
		f.Add(s, "s3://b/_entropy_/f", "_entropy_/f", "_entropy_")
	}
	f.Fuzz(func(t *testing.T, ref, mapFrom, mapTo, entropyKey string) {
		norms := fuzzNormalizers(t)
		if fz, err := New(Config{StoreRoot: "s3://b/p", EntropyKey: entropyKey, Maps: []Mapping{{From: mapFrom, To: mapTo}}}); err == nil {
			norms = append(norms, fz)
		}
		for i, n := range norms {
			k := n.Absolute(ref)
			if fk, ok := n.fastAbsolute(ref); ok && fk != n.slowAbsolute(ref) {
				t.Fatalf("normalizer %d: fast path %q = %+v, general path %+v", i, ref, fk, n.slowAbsolute(ref))
			}
			if k.Inside {
				checkCleanKey(t, "Absolute("+ref+")", k.Path)
			}
			for _, alias := range s3Spellings(ref) {
				if ak := n.Absolute(alias); ak != k {
					t.Fatalf("normalizer %d: %q = %+v but its alias %q = %+v", i, ref, k, alias, ak)
				}
			}
		}
		// Round trip through the bare bucket (no maps, no entropy key): its keys are its objects' names.
		bare := norms[2]
		if k := bare.Absolute(ref); k.Inside && k.Path != "" {
			if back := bare.Absolute("s3://b/" + k.Path); back != k {
				t.Fatalf("%q = %+v, but s3://b/%s = %+v", ref, k, k.Path, back)
			}
		}
	})
}

// FuzzRelative resolves hostile relative handle names against a _metadata key: an inside key never climbs
// above the store root and is canonical.
func FuzzRelative(f *testing.F) {
	for _, s := range []string{"x", "../x", "../../x", "./a/../b", "a//b/", "/abs", "..", ".", "", "a/../../../etc"} {
		f.Add("job/chk-1/_metadata", s)
	}
	f.Fuzz(func(t *testing.T, metadataKey, name string) {
		n := fuzzNormalizers(t)[0]
		k := n.Relative(metadataKey, name)
		if !k.Inside {
			if !strings.HasPrefix(k.Path, "relative:") {
				t.Fatalf("Relative(%q, %q) = %+v: an outside relative reference must stay marked as one", metadataKey, name, k)
			}
			return
		}
		checkCleanKey(t, "Relative("+metadataKey+", "+name+")", k.Path)
	})
}

// FuzzCandidates: for any reference and `_metadata` key, every candidate place is a clean store key (no
// empty, "." or ".." segment, never above the store root) below its folder, and its prefix and relative
// part rebuild the reference's path.
func FuzzCandidates(f *testing.F) {
	f.Add("file:/mnt/flink/j1/chk-7/f", "prod/j1/chk-7/_metadata")
	f.Add("s3a://b/x/../j/shared/f", "j/chk-1/_metadata")
	f.Add("hdfs://nn/a/savepoint-1/f", "sp/savepoint-1/_metadata")
	f.Add("file:/chk-1/chk-1/chk-1", "chk-1/chk-1/_metadata")
	n, err := New(Config{StoreRoot: "/store"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, uri, meta string) {
		for _, c := range n.Candidates(uri, meta, nil) {
			k := c.Key()
			for _, s := range strings.Split(k, "/") {
				if s == "" || s == "." || s == ".." {
					t.Fatalf("Candidates(%q, %q): key %q has segment %q", uri, meta, k, s)
				}
			}
			if c.Dir != "" && !strings.HasPrefix(k, c.Dir+"/") {
				t.Fatalf("Candidates(%q, %q): key %q not below %q", uri, meta, k, c.Dir)
			}
			if got, want := append(append([]string{}, c.Prefix.Segs...), c.Rel...), n.parse(uri).Segs; strings.Join(got, "/") != strings.Join(want, "/") {
				t.Fatalf("Candidates(%q, %q): prefix+rel %q != %q", uri, meta, got, want)
			}
		}
	})
}
