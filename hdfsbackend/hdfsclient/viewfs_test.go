package hdfsclient_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/colinmarc/hdfs/v2/hadoopconf"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

const mt = "fs.viewfs.mounttable."

// haConf is an HA nameservice ns1 and a plain NameNode nn2, as hdfs-site.xml would give them.
func haConf(extra map[string]string) hadoopconf.HadoopConf {
	c := hadoopconf.HadoopConf{
		"dfs.nameservices":                  "ns1",
		"dfs.ha.namenodes.ns1":              "a,b",
		"dfs.namenode.rpc-address.ns1.a":    "nn-a:8020",
		"dfs.namenode.rpc-address.ns1.b":    "nn-b:8020",
		"fs.viewfs.mounttable.other.link./": "hdfs://nn2:8020/",
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// TestResolveViewStore: a viewfs:// store resolves through its cluster's mount table to the one hdfs://
// directory of the longest link (or the fallback); one that spans links, reaches no link, leaves HDFS,
// loops, climbs or uses a link kind the guard cannot follow is refused with an error naming why.
func TestResolveViewStore(t *testing.T) {
	base := map[string]string{
		mt + "prod.link./flink":                   "hdfs://ns1/data/flink/",
		mt + "prod.link./flink2/":                 "hdfs://nn2:8020/f2",
		mt + "prod.link./user":                    "hdfs://ns1/user",
		mt + "prod.link./s3":                      "s3a://bucket/x",
		mt + "prod.link./chain":                   "viewfs://inner/deep",
		mt + "prod.homedir":                       "/user",
		mt + "inner.link./deep":                   "hdfs://ns1/deep/store",
		mt + "loop1.link./a":                      "viewfs://loop2/b",
		mt + "loop2.link./b":                      "viewfs://loop1/a",
		mt + "fb.link./pinned":                    "hdfs://nn2:8020/p",
		mt + "fb.linkFallback":                    "hdfs://ns1/",
		mt + "default.link./flink":                "hdfs://ns1/def",
		mt + "slash.linkMergeSlash":               "hdfs://ns1/root",
		mt + "nested.link./a":                     "hdfs://ns1/a",
		mt + "nested.link./a/b":                   "hdfs://ns1/b",
		mt + "twice.link./a":                      "hdfs://ns1/a",
		mt + "twice.link./a/":                     "hdfs://ns1/other",
		mt + "merge.linkMerge./m":                 "hdfs://ns1/m1,hdfs://ns1/m2",
		mt + "merge.link./ok":                     "hdfs://ns1/ok",
		mt + "merge.linkNfly.minReplication=2./n": "hdfs://ns1/n1,hdfs://nn2:8020/n2",
		mt + "regex.linkRegex.^/(\\w+)":           "hdfs://ns1/$1",
		mt + "dotdot.link./a/../b":                "hdfs://ns1/b",
		mt + "dotdott.link./a":                    "hdfs://ns1/a/../../etc",
		mt + "reltarget.link./a":                  "flink/a",
		mt + "slashplus.linkMergeSlash":           "hdfs://ns1/",
		mt + "slashplus.link./a":                  "hdfs://ns1/a",
		mt + "odd.linkSomething":                  "hdfs://ns1/a",
		mt + "empty.link./a":                      "",
	}
	tests := []struct {
		name, store, conf2  string
		wantPath, wantCanon string
		err                 string
	}{
		{name: "link", store: "viewfs://prod/flink/checkpoints", wantPath: "/data/flink/checkpoints", wantCanon: "ns1"},
		{name: "link itself, trailing slashes", store: "viewfs://prod/flink//", wantPath: "/data/flink", wantCanon: "ns1"},
		{name: "link with trailing slash in key", store: "viewfs://prod/flink2/x", wantPath: "/f2/x", wantCanon: "nn2:8020"},
		{name: "sibling prefix is not the link", store: "viewfs://prod/flinkx", err: "no link"},
		{name: "chained viewfs target", store: "viewfs://prod/chain/ck", wantPath: "/deep/store/ck", wantCanon: "ns1"},
		{name: "fallback", store: "viewfs://fb/flink/ck", wantPath: "/flink/ck", wantCanon: "ns1"},
		{name: "link beats fallback", store: "viewfs://fb/pinned/ck", wantPath: "/p/ck", wantCanon: "nn2:8020"},
		{name: "fallback root spans a link", store: "viewfs://fb/", err: "contains the ViewFS link /pinned"},
		{name: "default table", store: "viewfs:///flink/ck", wantPath: "/def/ck", wantCanon: "ns1"},
		{name: "default table renamed", store: "viewfs:///pinned/ck", conf2: "fb", wantPath: "/p/ck", wantCanon: "nn2:8020"},
		{name: "linkMergeSlash", store: "viewfs://slash/ck", wantPath: "/root/ck", wantCanon: "ns1"},
		{name: "store spans links", store: "viewfs://prod/", err: "contains the ViewFS link"},
		{name: "target not HDFS", store: "viewfs://prod/s3/ck", err: "not HDFS"},
		{name: "loop", store: "viewfs://loop1/a", err: "loop"},
		{name: "unknown cluster", store: "viewfs://nosuch/a", err: "no links"},
		{name: "nested links", store: "viewfs://nested/a/c", err: "nested below link /a"},
		{name: "link defined twice", store: "viewfs://twice/a", err: "defined twice"},
		{name: "merge link", store: "viewfs://merge/m/ck", err: "linkMerge link /m"},
		{name: "nfly link", store: "viewfs://merge/n", err: "linkNfly link /n"},
		{name: "beside merge and nfly links", store: "viewfs://merge/ok/ck", wantPath: "/ok/ck", wantCanon: "ns1"},
		{name: "above merge links", store: "viewfs://merge/", err: "contains the ViewFS link"},
		{name: "regex link", store: "viewfs://regex/a", err: "regex link"},
		{name: "dotdot in link key", store: "viewfs://dotdot/b", err: `".."`},
		{name: "dotdot in target", store: "viewfs://dotdott/a", err: `".."`},
		{name: "relative target", store: "viewfs://reltarget/a", err: "not a URI"},
		{name: "linkMergeSlash with links", store: "viewfs://slashplus/a", err: "linkMergeSlash cannot be combined"},
		{name: "unknown key", store: "viewfs://odd/a", err: "unknown key"},
		{name: "empty target", store: "viewfs://empty/a", err: "empty target"},
		{name: "dotdot in store", store: "viewfs://prod/flink/../user", err: `".."`},
		{name: "port in cluster", store: "viewfs://prod:8020/flink", err: "ports"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]string{}
			for k, v := range base {
				extra[k] = v
			}
			if tc.conf2 != "" {
				extra["fs.viewfs.mounttable.default-name-key"] = tc.conf2
			}
			r, err := hdfsclient.ResolveStore(tc.store, haConf(extra))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Path != tc.wantPath || r.Canonical != tc.wantCanon || r.View != tc.store {
				t.Fatalf("resolved to %+v, want path %s on %s", r, tc.wantPath, tc.wantCanon)
			}
		})
	}
}

// TestViewAliases: the viewfs:// names of a store root are exactly the view paths the mount tables
// map to it (through a link above it, the fallback, a chained link, the default table as viewfs:///),
// never a path whose longer link points elsewhere, and never a table that does not parse.
func TestViewAliases(t *testing.T) {
	conf := haConf(map[string]string{
		mt + "prod.link./flink":                 "hdfs://ns1/data/flink",
		mt + "prod.link./alt":                   "hdfs://nn-a:8020/data", // a NameNode of ns1: the same namespace
		mt + "prod.link./elsewhere":             "hdfs://nn2:8020/data/flink",
		mt + "fb.link./data/flink/ck":           "hdfs://nn2:8020/x", // shadows the fallback at the store path
		mt + "fb.linkFallback":                  "hdfs://ns1/",
		mt + "fb2.linkFallback":                 "hdfs://ns1/data",
		mt + "chain.link./c":                    "viewfs://prod/flink",
		mt + "broken.link./a":                   "hdfs://ns1/data/flink/ck",
		mt + "broken.link./a/b":                 "hdfs://ns1/b",
		"fs.viewfs.mounttable.default.name.key": "prod",
	})
	r, err := hdfsclient.ResolveStore("hdfs://ns1/data/flink/ck", conf)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"viewfs:///alt/flink/ck", "viewfs:///flink/ck",
		"viewfs://chain/c/ck",
		"viewfs://fb2/flink/ck",
		"viewfs://prod/alt/flink/ck", "viewfs://prod/flink/ck",
	}
	if !reflect.DeepEqual(r.ViewURIs, want) {
		t.Fatalf("ViewURIs = %q, want %q", r.ViewURIs, want)
	}
	v, err := hdfsclient.ResolveStore("viewfs://prod/flink/ck", conf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.ViewURIs, want) || v.Path != "/data/flink/ck" {
		t.Fatalf("viewfs store: %+v", v)
	}
}

// TestViewDefaultFS: fs.defaultFS=viewfs://… (the usual ViewFS setup) does not break hdfs:// stores,
// and hdfs:/// then has no default HDFS to name.
func TestViewDefaultFS(t *testing.T) {
	conf := haConf(map[string]string{"fs.defaultFS": "viewfs://prod", mt + "prod.link./f": "hdfs://ns1/f"})
	if _, err := hdfsclient.ResolveStore("hdfs://ns1/f", conf); err != nil {
		t.Fatal(err)
	}
	if _, err := hdfsclient.ResolveStore("hdfs:///f", conf); err == nil || !strings.Contains(err.Error(), "no fs.defaultFS") {
		t.Fatalf("hdfs:/// with a viewfs default FS: %v", err)
	}
	conf["fs.hdfs.impl"] = "org.apache.hadoop.fs.viewfs.ViewFileSystemOverloadScheme"
	if _, err := hdfsclient.ResolveStore("hdfs://ns1/f", conf); err == nil || !strings.Contains(err.Error(), "overload") {
		t.Fatalf("overload scheme: %v", err)
	}
}

// FuzzResolveView: any mount table key and target, and any store URI, either resolve to an hdfs:// URI
// whose path is clean and absolute, or fail; never a panic, never another scheme.
func FuzzResolveView(f *testing.F) {
	f.Add("link./flink/", "hdfs://ns1/data/", "viewfs://c/flink/ck")
	f.Add("linkFallback", "hdfs:///", "viewfs://c/../x")
	f.Add("link./a", "viewfs://c/a", "viewfs://c/a")
	f.Add("linkMergeSlash", "hdfs://nn:8020", "viewfs:///")
	f.Fuzz(func(t *testing.T, key, target, store string) {
		conf := haConf(map[string]string{mt + "c." + key: target, "fs.viewfs.mounttable.default-name-key": "c"})
		r, err := hdfsclient.ResolveStore(store, conf)
		if err != nil {
			return
		}
		if !strings.HasPrefix(r.Path, "/") || strings.Contains(r.Path, "/../") || strings.HasSuffix(r.Path, "/..") {
			t.Fatalf("%q resolved to path %q", store, r.Path)
		}
	})
}
