package hdfsclient

import (
	"bytes"
	"net"
	"strings"
	"testing"

	hdfs "github.com/colinmarc/hdfs/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestNamenodeCallOf: the NameNode connection is found on the pinned library's client, and any other
// shape (no field, another type, not connected) is an error naming what is needed, never a guess.
func TestNamenodeCallOf(t *testing.T) {
	type noField struct{ Other int }
	type wrongType struct{ namenode *net.TCPConn }
	_ = wrongType{}.namenode
	for _, tc := range []struct {
		name string
		c    any
		want string
	}{
		{"nil client", (*hdfs.Client)(nil), "non-nil *hdfs.Client"},
		{"not a pointer", hdfs.Client{}, "non-nil *hdfs.Client"},
		{"no field", &noField{}, "has no field namenode"},
		{"wrong type", &wrongType{}, "namenode is a *net.TCPConn"},
		{"not connected", &hdfs.Client{}, "namenode is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call, err := namenodeCallOf(tc.c)
			if err == nil || call != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("namenodeCallOf(%T) = %v, %v; want an error containing %q", tc.c, call != nil, err, tc.want)
			}
		})
	}

	// The library connects at NewClient (simple authentication only writes its handshake): a listener
	// that accepts is enough to get a real client.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}()
	c, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{ln.Addr().String()}, User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if call, err := namenodeCallOf(c); err != nil || call == nil {
		t.Fatalf("the pinned library's client: %v", err)
	}
}

// TestRename2Request: the request is ClientNamenodeProtocol's Rename2RequestProto with
// overwriteDest=false on the wire (field 3 present and 0), sent as method rename2.
func TestRename2Request(t *testing.T) {
	var method string
	var wire []byte
	call := func(m string, req, resp proto.Message) error {
		method = m
		var err error
		if wire, err = proto.Marshal(req); err != nil {
			return err
		}
		return proto.Unmarshal(nil, resp) // the NameNode's empty Rename2ResponseProto
	}
	for _, overwrite := range []bool{false, true} {
		if err := rename2(call, "/a/src", "/b/dst", overwrite); err != nil {
			t.Fatal(err)
		}
		var want []byte
		want = protowire.AppendTag(want, 1, protowire.BytesType)
		want = protowire.AppendString(want, "/a/src")
		want = protowire.AppendTag(want, 2, protowire.BytesType)
		want = protowire.AppendString(want, "/b/dst")
		want = protowire.AppendTag(want, 3, protowire.VarintType)
		want = protowire.AppendVarint(want, protowire.EncodeBool(overwrite))
		if method != "rename2" || !bytes.Equal(wire, want) {
			t.Errorf("overwrite=%v: sent %s %x; want rename2 %x", overwrite, method, wire, want)
		}
	}
	if err := rename2(nil, "/a", "/b", false); err == nil {
		t.Error("rename2 without a connection succeeded")
	}
}
