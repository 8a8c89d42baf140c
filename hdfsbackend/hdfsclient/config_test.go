package hdfsclient_test

import (
	"strings"
	"testing"

	"github.com/colinmarc/hdfs/v2/hadoopconf"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

func TestParseLocation(t *testing.T) {
	tests := []struct {
		in, auth, path, err string
	}{
		{in: "hdfs://nn:8020/flink/checkpoints", auth: "nn:8020", path: "/flink/checkpoints"},
		{in: "HDFS://NN:8020/flink/checkpoints/", auth: "nn:8020", path: "/flink/checkpoints"},
		{in: "hdfs://nn/flink//checkpoints/./", auth: "nn", path: "/flink/checkpoints"},
		{in: "hdfs://ns1/flink", auth: "ns1", path: "/flink"},
		{in: "hdfs:///flink", auth: "", path: "/flink"},
		{in: "hdfs:/flink", auth: "", path: "/flink"},
		{in: "hdfs://nn:8020", auth: "nn:8020", path: "/"},
		{in: "hdfs://nn1:8020,nn2:8020/f", auth: "nn1:8020,nn2:8020", path: "/f"},
		{in: "hdfs://[::1]:9000/f", auth: "[::1]:9000", path: "/f"},
		{in: "s3://b/f", err: "want hdfs://"},
		{in: "/flink", err: "want hdfs://"},
		{in: "hdfs:flink", err: "absolute"},
		{in: "hdfs://nn/../etc", err: `".."`},
		{in: "hdfs://user@nn/f", err: "user info"},
		{in: "hdfs://nn/f?x=1", err: "queries"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			l, err := hdfsclient.ParseLocation(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || l.Authority != tc.auth || l.Path != tc.path {
				t.Fatalf("= %+v, %v; want %q %q", l, err, tc.auth, tc.path)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	ha := hadoopconf.HadoopConf{
		"fs.defaultFS":                       "hdfs://ns1",
		"dfs.nameservices":                   "ns1",
		"dfs.ha.namenodes.ns1":               "nn2, nn1",
		"dfs.namenode.rpc-address.ns1.nn1":   "host1:8020",
		"dfs.namenode.rpc-address.ns1.nn2":   "host2:8020",
		"dfs.namenode.rpc-address.ns1.other": "unused:1",
	}
	single := hadoopconf.HadoopConf{"fs.defaultFS": "hdfs://nn.example:9000"}
	tests := []struct {
		name, uri string
		conf      hadoopconf.HadoopConf
		addrs     string
		canonical string
		aliases   string
		err       string
	}{
		{"direct", "hdfs://nn:8020/f", nil, "nn:8020", "nn:8020", "", ""},
		{"port-less", "hdfs://nn/f", nil, "nn:8020", "nn:8020", "", ""},
		{"several", "hdfs://a:1,b/f", nil, "a:1,b:8020", "a:1", "b:8020", ""},
		{"nameservice", "hdfs://ns1/f", ha, "host1:8020,host2:8020", "ns1", "host1:8020,host2:8020,", ""},
		{"default ha", "hdfs:///f", ha, "host1:8020,host2:8020", "ns1", "host1:8020,host2:8020,", ""},
		{"default single", "hdfs:///f", single, "nn.example:9000", "nn.example:9000", "", ""},
		{"direct is default", "hdfs://nn.example:9000/f", single, "nn.example:9000", "nn.example:9000", "", ""},
		{"other than default", "hdfs://x:1/f", single, "x:1", "x:1", "", ""},
		{"no default", "hdfs:///f", nil, "", "", "", "no fs.defaultFS"},
		{"bad default", "hdfs:///f", hadoopconf.HadoopConf{"fs.defaultFS": "file:///"}, "", "", "", "fs.defaultFS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := hdfsclient.ParseLocation(tc.uri)
			if err != nil {
				t.Fatal(err)
			}
			r, err := hdfsclient.Resolve(l, tc.conf)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(r.Addresses, ","); got != tc.addrs {
				t.Errorf("addresses %s, want %s", got, tc.addrs)
			}
			if r.Canonical != tc.canonical {
				t.Errorf("canonical %s, want %s", r.Canonical, tc.canonical)
			}
			if got := strings.Join(r.Aliases, ","); got != tc.aliases {
				t.Errorf("aliases %q, want %q", got, tc.aliases)
			}
		})
	}
}

func FuzzParseLocation(f *testing.F) {
	for _, s := range []string{"hdfs://nn:8020/a", "hdfs:///a", "hdfs:/a/../b", "hdfs://a,b/c", "hdfs://[::1]/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := hdfsclient.ParseLocation(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(l.Path, "/") || strings.Contains(l.Path, "/../") || strings.HasSuffix(l.Path, "/..") || strings.Contains(l.Path, "//") {
			t.Fatalf("%q: unclean path %q", s, l.Path)
		}
		l2, err := hdfsclient.ParseLocation(l.String())
		if err != nil || l2 != l {
			t.Fatalf("%q: round trip %q → %+v, %v", s, l.String(), l2, err)
		}
		_, _ = hdfsclient.Resolve(l, nil)
	})
}
