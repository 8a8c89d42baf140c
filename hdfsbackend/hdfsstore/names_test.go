package hdfsstore_test

import (
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsstore"
	"github.com/ckguard/ckguard/refindex/pathnorm"
)

// TestURIsResolveToOneKey: every spelling of an HDFS URI Flink may write (host:port, port-less,
// default FS, upper case, an HA nameservice or one of its NameNodes) resolves to the same store key
// under the names the store declares (Root + RootAliases), and --map still maps other prefixes.
func TestURIsResolveToOneKey(t *testing.T) {
	single := hadoopConf("hdfs://nn.example:8020")
	ha := hadoopConf("hdfs://ns1")
	ha["dfs.ha.namenodes.ns1"] = "nn1,nn2"
	ha["dfs.namenode.rpc-address.ns1.nn1"] = "host1:8020"
	ha["dfs.namenode.rpc-address.ns1.nn2"] = "host2:8020"
	const key = "job_d29e1b63/shared/sst-1"
	tests := []struct {
		name, store string
		conf        map[string]string
		maps        []pathnorm.Mapping
		inside      []string
		outside     []string
	}{
		{name: "single", store: "hdfs://nn.example:8020/flink/checkpoints", conf: single,
			inside: []string{
				"hdfs://nn.example:8020/flink/checkpoints/" + key,
				"hdfs://nn.example/flink/checkpoints/" + key,
				"HDFS://NN.EXAMPLE:8020/flink/checkpoints/" + key,
				"hdfs:///flink/checkpoints/" + key,
				"hdfs:/flink/checkpoints/" + key,
				"hdfs://nn.example:8020//flink/./checkpoints/x/../" + key,
			},
			outside: []string{
				"hdfs://nn.example:9000/flink/checkpoints/" + key,
				"hdfs://other:8020/flink/checkpoints/" + key,
				"hdfs://nn.example:8020/flink/other/" + key,
				"file:/flink/checkpoints/" + key,
			}},
		{name: "nameservice", store: "hdfs://ns1/flink/checkpoints", conf: ha,
			inside: []string{
				"hdfs://ns1/flink/checkpoints/" + key,
				"hdfs:///flink/checkpoints/" + key,
				"hdfs://host1:8020/flink/checkpoints/" + key,
				"hdfs://host2/flink/checkpoints/" + key,
			},
			outside: []string{"hdfs://ns2/flink/checkpoints/" + key}},
		{name: "default FS", store: "hdfs:///flink/checkpoints", conf: single,
			inside: []string{
				"hdfs://nn.example:8020/flink/checkpoints/" + key,
				"hdfs:///flink/checkpoints/" + key,
			}},
		{name: "map", store: "hdfs://nn.example:8020/flink/checkpoints", conf: single,
			maps:   []pathnorm.Mapping{{From: "hdfs://old-nn:8020/ckpt", To: ""}},
			inside: []string{"hdfs://old-nn/ckpt/" + key, "hdfs://nn.example/flink/checkpoints/" + key}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := hdfsclient.ParseLocation(tc.store)
			if err != nil {
				t.Fatal(err)
			}
			res, err := hdfsclient.Resolve(l, tc.conf)
			if err != nil {
				t.Fatal(err)
			}
			s := hdfsstore.New(hdfsfake.New("flink"), res, hdfsstore.Options{})
			n, err := pathnorm.New(pathnorm.Config{StoreRoot: s.Root(), RootAliases: s.RootAliases(), Maps: tc.maps})
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range tc.inside {
				if k := n.Absolute(u); !k.Inside || k.Path != key {
					t.Errorf("%s → %+v, want store key %s", u, k, key)
				}
			}
			for _, u := range tc.outside {
				if k := n.Absolute(u); k.Inside {
					t.Errorf("%s → store key %s, want outside", u, k.Path)
				}
			}
		})
	}
}

func hadoopConf(defaultFS string) map[string]string {
	return map[string]string{"fs.defaultFS": defaultFS}
}
